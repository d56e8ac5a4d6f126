"""Hybrid retrieval: fuse a lexical (BM25) and a dense ranking of the same corpus.

Two fusion rules, both on the candidate lists of one query (rows are corpus positions):

- "score" (normalised score fusion, a.k.a. convex combination): each run's scores are min-max
  normalised to [0, 1] over its own candidates, a document missing from a run gets 0 there, and
  fused = `alpha` * dense + (1 - `alpha`) * bm25. Normalising first matters because BM25 scores
  are unbounded (here ~1-20) while cosine lies in [-1, 1]; raw sums would be BM25 alone.
- "rrf" (reciprocal rank fusion, Cormack et al. 2009): fused = sum over runs of
  weight / (`rrf_k` + rank), rank starting at 1; `rrf_k` = 60 as in the paper. It ignores score
  scales entirely, so it needs no tuning, at the cost of ignoring how confident each run is.

Exact ties are broken by row index, so fused rankings are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentic_rl.retrieval.bm25 import BM25Index, Hits
from agentic_rl.retrieval.dense import DenseIndex

FusionMethod = Literal["score", "rrf"]
FUSION_METHODS = ("score", "rrf")


def min_max_normalise(hits: list[tuple[int, float]]) -> dict[int, float]:
    """Scores mapped to [0, 1] over this list; all-equal scores map to 1 (they tie at the top)."""
    if not hits:
        return {}
    scores = [score for _, score in hits]
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return {row: 1.0 for row, _ in hits}
    return {row: (score - low) / (high - low) for row, score in hits}


def score_fusion(
    runs: list[list[tuple[int, float]]], weights: list[float]
) -> list[tuple[int, float]]:
    """Weighted sum of min-max normalised scores, best first (see module docstring)."""
    if len(runs) != len(weights):
        raise ValueError(f"{len(runs)} runs but {len(weights)} weights")
    fused: dict[int, float] = {}
    for hits, weight in zip(runs, weights, strict=True):
        for row, score in min_max_normalise(hits).items():
            fused[row] = fused.get(row, 0.0) + weight * score
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def reciprocal_rank_fusion(
    runs: list[list[tuple[int, float]]], weights: list[float] | None = None, rrf_k: int = 60
) -> list[tuple[int, float]]:
    """sum_runs weight / (rrf_k + rank), ranks from 1, best first (see module docstring)."""
    weights = weights or [1.0] * len(runs)
    if len(runs) != len(weights):
        raise ValueError(f"{len(runs)} runs but {len(weights)} weights")
    fused: dict[int, float] = {}
    for hits, weight in zip(runs, weights, strict=True):
        for rank, (row, _) in enumerate(hits, start=1):
            fused[row] = fused.get(row, 0.0) + weight / (rrf_k + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))


def fuse(
    bm25_hits: list[tuple[int, float]],
    dense_hits: list[tuple[int, float]],
    method: FusionMethod = "score",
    alpha: float = 0.5,
    rrf_k: int = 60,
) -> list[tuple[int, float]]:
    """Fuse one query's BM25 and dense candidates; `alpha` is the dense weight in [0, 1]."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    weights = [1.0 - alpha, alpha]
    if method == "score":
        return score_fusion([bm25_hits, dense_hits], weights)
    if method == "rrf":
        return reciprocal_rank_fusion([bm25_hits, dense_hits], weights, rrf_k)
    raise ValueError(f"unknown fusion method {method!r} (valid: {', '.join(FUSION_METHODS)})")


@dataclass
class HybridIndex:
    """BM25 + dense over the same rows; each run contributes its top `candidates`.

    `candidates` should be a few times the requested topk: a document ranked 15th by BM25 and
    2nd by the dense model can still win after fusion.
    """

    bm25: BM25Index
    dense: DenseIndex
    method: FusionMethod = "score"
    alpha: float = 0.5
    candidates: int = 50
    rrf_k: int = 60

    def search(self, queries: list[str], topk: int) -> Hits:
        depth = max(topk, self.candidates)
        lexical = self.bm25.search(queries, depth)
        semantic = self.dense.search(queries, depth)
        return [
            fuse(b, d, self.method, self.alpha, self.rrf_k)[:topk]
            for b, d in zip(lexical, semantic, strict=True)
        ]

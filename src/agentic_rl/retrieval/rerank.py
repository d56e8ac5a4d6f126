"""Second-stage reranking: re-score a first stage's top-n candidates with a stronger model.

Two rerankers:

- `BiEncoderReranker` (the default, and the one that runs offline here): cosine between the
  MiniLM query embedding and each candidate's MiniLM document embedding. Document vectors come
  from the index when it has them (a flat FAISS index stores them) or are encoded on demand and
  cached. Over BM25 candidates this is the classic "lexical recall, semantic precision" pipeline.
- `CrossEncoderReranker`: a sequence-classification model that reads (query, document) together
  and outputs one relevance logit (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2). No cross-encoder
  weights ship in any package available here, so it is only exercised with a tiny random model
  in tests; point `model_path` at a local folder of real weights to use it.

A reranker only reorders and re-scores the candidates it is given: recall is bounded by the
first stage's top-n.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agentic_rl.retrieval.bm25 import Hits
from agentic_rl.retrieval.dense import MiniLMEmbedder


class Reranker(Protocol):
    """Re-scores candidate rows per query; returns them best first with the new scores."""

    def rerank(self, queries: list[str], hits: Hits) -> Hits: ...


def _sorted(rows: list[int], scores: list[float]) -> list[tuple[int, float]]:
    # Ties broken by row index so results are deterministic.
    return sorted(zip(rows, scores, strict=True), key=lambda item: (-item[1], item[0]))


@dataclass
class BiEncoderReranker:
    """Cosine of MiniLM embeddings over each query's candidates.

    `texts` are the corpus contents by row. `doc_vectors` ([num_docs, dim], unit length) skips
    document encoding entirely; without it, vectors are encoded once per row and cached.
    """

    embedder: MiniLMEmbedder
    texts: list[str]
    doc_vectors: np.ndarray | None = None
    _cache: dict[int, np.ndarray] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _vectors(self, rows: list[int]) -> np.ndarray:
        if self.doc_vectors is not None:
            return self.doc_vectors[rows]
        with self._lock:
            missing = sorted({row for row in rows if row not in self._cache})
        if missing:
            encoded = self.embedder.encode([self.texts[row] for row in missing])
            with self._lock:
                self._cache.update(zip(missing, encoded, strict=True))
        with self._lock:
            return np.stack([self._cache[row] for row in rows])

    def rerank(self, queries: list[str], hits: Hits) -> Hits:
        if not queries:
            return []
        query_vectors = self.embedder.encode(list(queries))  # [Q, dim], one batch for all
        all_rows = sorted({row for candidates in hits for row, _ in candidates})
        if not all_rows:
            return [[] for _ in queries]
        position = {row: i for i, row in enumerate(all_rows)}
        doc_vectors = self._vectors(all_rows)  # [R, dim]
        out = []
        for q, candidates in zip(query_vectors, hits, strict=True):
            rows = [row for row, _ in candidates]
            scores = doc_vectors[[position[row] for row in rows]] @ q if rows else []
            out.append(_sorted(rows, [float(s) for s in scores]))
        return out


@dataclass
class CrossEncoderReranker:
    """A local sequence-classification model scoring (query, document) pairs jointly.

    Uses the first logit as the relevance score (cross-encoders are trained with one label).
    """

    model_path: str | Path
    texts: list[str]
    batch_size: int = 32
    max_length: int = 512
    _model: Any = field(default=None, init=False, repr=False)
    _tokenizer: Any = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def load(self) -> None:
        with self._lock:
            if self._model is not None:
                return
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            if not Path(self.model_path).is_dir():
                raise FileNotFoundError(f"cross-encoder folder not found: {self.model_path}")
            path = str(self.model_path)
            self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
            self._model = model.eval()

    def score_pairs(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Relevance logits for (query, document) pairs, batched."""
        import torch

        self.load()
        scores: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(pairs), self.batch_size):
                chunk = pairs[start : start + self.batch_size]
                with self._lock:  # fast tokenizers are not safe to call from several threads
                    batch = self._tokenizer(
                        [q for q, _ in chunk],
                        [d for _, d in chunk],
                        padding=True,
                        truncation=True,
                        max_length=self.max_length,
                        return_tensors="pt",
                    )
                logits = self._model(**batch).logits  # [b, num_labels]
                scores.extend(logits[:, 0].float().tolist())
        return scores

    def rerank(self, queries: list[str], hits: Hits) -> Hits:
        pairs = [
            (q, self.texts[row]) for q, cands in zip(queries, hits, strict=True) for row, _ in cands
        ]
        flat = iter(self.score_pairs(pairs))
        return [_sorted([row for row, _ in cands], [next(flat) for _ in cands]) for cands in hits]


@dataclass
class RerankedSearch:
    """First stage for `candidates` rows per query, then `reranker` reorders; top-k kept."""

    first_stage: Any  # anything with search(queries, topk) -> Hits
    reranker: Reranker
    candidates: int = 20

    def search(self, queries: list[str], topk: int) -> Hits:
        hits = self.first_stage.search(queries, max(topk, self.candidates))
        return [row[:topk] for row in self.reranker.rerank(queries, hits)]

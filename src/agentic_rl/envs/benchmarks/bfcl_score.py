"""BFCL's summary scores (its leaderboard's aggregate columns) from per-category accuracies.

The definitions are those of `generate_leaderboard_csv` in the `bfcl-eval` package
(`bfcl_eval/eval_checker/eval_runner_helper.py`, version 2026.3.23) and its three helpers,
`calculate_unweighted_accuracy` (the plain mean of the parts' accuracies),
`calculate_weighted_accuracy` (weighted by each part's number of entries) and
`calculate_percentage_weighted_accuracy` (fixed weights, normalised to sum to 1):

| score (`env/accuracy@<name>`) | BFCL's column | definition |
|---|---|---|
| `non_live_simple_ast` | Non-Live Simple AST | mean(simple_python, simple_java, simple_javascript) |
| `non_live` | Non-Live Overall Acc (= AST Summary) | mean(non_live_simple_ast, multiple, parallel, parallel_multiple) |
| `live` | Live Overall Acc | live_simple, live_multiple, live_parallel, live_parallel_multiple, weighted by entries |
| `irrelevance_detection` | Irrelevance Detection (overall table) | mean(irrelevance, live_irrelevance) |
| `relevance_detection` | Relevance Detection | live_relevance |
| `multi_turn` | Multi Turn Acc | mean(multi_turn_base, _miss_func, _miss_param, _long_context) |
| `web_search` | Web Search Acc | mean(web_search_base, web_search_no_snippet) |
| `memory` | Memory Acc | mean(memory_kv, memory_vector, memory_rec_sum) |
| `agentic` | Agentic Overall Acc | mean(web_search, memory) |
| `overall` | Overall Acc | (10 non_live + 10 live + 10 irrelevance_detection + 30 multi_turn + 40 agentic) / 100 |

Irrelevance is not part of `non_live` (BFCL reports it beside it), and relevance detection is
reported but weighs nothing in `overall`.

One departure, on purpose: BFCL counts a category it did not run as accuracy 0 inside these
means (and shows the aggregate as "N/A" in some tables, as a number in others). Here an
aggregate is computed only when every category under it was measured; otherwise it is left out
and `missing_categories` names what it lacks, so no score is ever an average with invented
zeros. With the envs of this project (`bfcl`: the non-live categories; `bfcl_multi_turn`: the
multi-turn ones) `non_live_simple_ast`, `non_live` and `multi_turn` can be computed; `live`,
`irrelevance_detection` and `relevance_detection` need the live categories (training data
here), `web_search`, `memory` and `agentic` need categories no env offers, so `overall` is
never computed.

Pure arithmetic on numbers: no BFCL import. The BFCL envs declare it as their
`summary_metrics` (envs/base.py), so every evaluation of a BFCL run carries these scores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

Rule = Literal["mean", "entry_weighted", "fixed_weights"]


class Aggregate(NamedTuple):
    """One summary score: how it combines its parts (categories or earlier aggregates)."""

    rule: Rule
    parts: tuple[str, ...]
    weights: tuple[float, ...] = ()
    """Only for "fixed_weights": one per part, normalised to sum to 1 (BFCL's 10/10/10/30/40)."""


AGGREGATES: dict[str, Aggregate] = {
    "non_live_simple_ast": Aggregate("mean", ("simple_python", "simple_java", "simple_javascript")),
    "non_live": Aggregate(
        "mean", ("non_live_simple_ast", "multiple", "parallel", "parallel_multiple")
    ),
    "live": Aggregate(
        "entry_weighted",
        ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"),
    ),
    "irrelevance_detection": Aggregate("mean", ("irrelevance", "live_irrelevance")),
    "relevance_detection": Aggregate("mean", ("live_relevance",)),
    "multi_turn": Aggregate(
        "mean",
        (
            "multi_turn_base",
            "multi_turn_miss_func",
            "multi_turn_miss_param",
            "multi_turn_long_context",
        ),
    ),
    "web_search": Aggregate("mean", ("web_search_base", "web_search_no_snippet")),
    "memory": Aggregate("mean", ("memory_kv", "memory_vector", "memory_rec_sum")),
    "agentic": Aggregate("mean", ("web_search", "memory")),
    "overall": Aggregate(
        "fixed_weights",
        ("non_live", "live", "irrelevance_detection", "multi_turn", "agentic"),
        (10.0, 10.0, 10.0, 30.0, 40.0),
    ),
}
"""BFCL's summary scores by name, each after the aggregates it is built from."""

METRIC_PREFIX = "env/accuracy@"
"""Per-category accuracy and these scores share one metric family (envs/benchmarks/bfcl.py)."""


def leaf_categories(name: str) -> list[str]:
    """The BFCL categories an aggregate rests on, through the aggregates under it."""
    if name not in AGGREGATES:
        return [name]
    return [c for part in AGGREGATES[name].parts for c in leaf_categories(part)]


def missing_categories(name: str, accuracy: Mapping[str, float]) -> list[str]:
    """The categories an aggregate needs that `accuracy` (by category) does not hold; [] when
    it can be computed."""
    return [c for c in leaf_categories(name) if c not in accuracy]


def _combine(aggregate: Aggregate, values: list[float], entries: list[float]) -> float:
    if aggregate.rule == "mean":
        return sum(values) / len(values)
    if aggregate.rule == "entry_weighted":
        return sum(v * n for v, n in zip(values, entries, strict=True)) / sum(entries)
    total = sum(aggregate.weights)
    return sum(v * w / total for v, w in zip(values, aggregate.weights, strict=True))


def summary_scores(accuracy: Mapping[str, float], entries: Mapping[str, float]) -> dict[str, float]:
    """Every BFCL summary score whose categories are all in `accuracy` (category -> accuracy in
    [0, 1]), by name. `entries` (category -> number of entries its accuracy was measured on)
    weighs the parts of `live`; an aggregate's entry count is the sum of its parts', as in
    BFCL."""
    values, counts = dict(accuracy), dict(entries)
    out: dict[str, float] = {}
    for name, aggregate in AGGREGATES.items():  # in order: parts before what uses them
        if any(part not in values or part not in counts for part in aggregate.parts):
            continue
        parts = [values[p] for p in aggregate.parts]
        sizes = [counts[p] for p in aggregate.parts]
        values[name] = out[name] = _combine(aggregate, parts, sizes)
        counts[name] = sum(sizes)
    return out


def summary_metrics(metrics: Mapping[str, float], entries: Mapping[str, float]) -> dict[str, float]:
    """BFCL's summary scores as run metrics, from an evaluation's per-category accuracies
    (`env/accuracy@<category>`) and the number of episodes behind each (same keys); {} when
    no aggregate's categories are all there (any evaluation that is not BFCL's)."""
    accuracy = {
        k.removeprefix(METRIC_PREFIX): v for k, v in metrics.items() if k.startswith(METRIC_PREFIX)
    }
    sizes = {
        k.removeprefix(METRIC_PREFIX): v for k, v in entries.items() if k.startswith(METRIC_PREFIX)
    }
    accuracy = {c: v for c, v in accuracy.items() if c not in AGGREGATES}  # scores are not inputs
    return {METRIC_PREFIX + k: v for k, v in summary_scores(accuracy, sizes).items()}

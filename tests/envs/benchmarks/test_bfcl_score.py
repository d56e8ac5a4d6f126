"""BFCL's summary scores (envs/benchmarks/bfcl_score.py), computed by hand on made-up
per-category accuracies; no BFCL package needed, so these run on any install."""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.benchmarks.bfcl_score import (
    AGGREGATES,
    leaf_categories,
    missing_categories,
    summary_metrics,
    summary_scores,
)
from agentic_rl.train.summary import env_summary_metrics, summarize
from agentic_rl.types import Trajectory

NON_LIVE = {
    "simple_python": 0.9,
    "simple_java": 0.6,
    "simple_javascript": 0.3,
    "multiple": 0.8,
    "parallel": 0.5,
    "parallel_multiple": 0.4,
    "irrelevance": 1.0,
}
MULTI_TURN = {
    "multi_turn_base": 0.4,
    "multi_turn_miss_func": 0.2,
    "multi_turn_miss_param": 0.1,
    "multi_turn_long_context": 0.3,
}
LIVE = {
    "live_simple": 0.7,
    "live_multiple": 0.5,
    "live_parallel": 0.25,
    "live_parallel_multiple": 0.0,
    "live_irrelevance": 0.8,
    "live_relevance": 0.9,
}
AGENTIC = {
    "web_search_base": 0.6,
    "web_search_no_snippet": 0.2,
    "memory_kv": 0.3,
    "memory_vector": 0.6,
    "memory_rec_sum": 0.0,
}
EVERYTHING = NON_LIVE | MULTI_TURN | LIVE | AGENTIC
# entries per category: only `live` is weighted by them
SIZES = {c: 100.0 for c in EVERYTHING} | {
    "live_simple": 258.0,
    "live_multiple": 1053.0,
    "live_parallel": 16.0,
    "live_parallel_multiple": 24.0,
}


def test_non_live_and_multi_turn_from_the_categories_this_project_runs():
    scores = summary_scores(NON_LIVE | MULTI_TURN, SIZES)
    simple = (0.9 + 0.6 + 0.3) / 3  # 0.6: Python, Java, JavaScript weigh the same
    assert scores["non_live_simple_ast"] == pytest.approx(0.6)
    # irrelevance is not part of the non-live score
    assert scores["non_live"] == pytest.approx((simple + 0.8 + 0.5 + 0.4) / 4)  # 0.575
    assert scores["multi_turn"] == pytest.approx((0.4 + 0.2 + 0.1 + 0.3) / 4)  # 0.25
    # nothing that needs a category not run, and no invented zeros
    assert set(scores) == {"non_live_simple_ast", "non_live", "multi_turn"}


def test_the_overall_score_weighs_its_five_parts_10_10_10_30_40():
    scores = summary_scores(EVERYTHING, SIZES)
    live = (0.7 * 258 + 0.5 * 1053 + 0.25 * 16 + 0.0 * 24) / (258 + 1053 + 16 + 24)
    assert scores["live"] == pytest.approx(live)  # 0.5260: weighted by entries
    assert scores["irrelevance_detection"] == pytest.approx((1.0 + 0.8) / 2)
    assert scores["relevance_detection"] == pytest.approx(0.9)
    assert scores["web_search"] == pytest.approx(0.4)
    assert scores["memory"] == pytest.approx(0.3)
    assert scores["agentic"] == pytest.approx(0.35)
    overall = 0.1 * 0.575 + 0.1 * live + 0.1 * 0.9 + 0.3 * 0.25 + 0.4 * 0.35
    assert scores["overall"] == pytest.approx(overall)  # 0.41510
    assert scores["overall"] == pytest.approx(0.4151, abs=1e-4)


def test_an_aggregate_with_a_category_missing_is_left_out_and_says_what_it_lacks():
    present = NON_LIVE | MULTI_TURN
    del present["simple_java"]
    scores = summary_scores(present, SIZES)
    assert "non_live_simple_ast" not in scores and "non_live" not in scores
    assert "multi_turn" in scores
    assert missing_categories("non_live", present) == ["simple_java"]
    assert missing_categories("multi_turn", present) == []
    lacking = missing_categories("overall", NON_LIVE | MULTI_TURN)
    assert lacking == [*LIVE][:4] + ["live_irrelevance", *AGENTIC]


def test_every_aggregate_rests_on_bfcl_categories_only():
    leaves = {c for name in AGGREGATES for c in leaf_categories(name)}
    assert leaves == set(EVERYTHING)


def _episode(category: str, passed: float) -> Trajectory:
    metrics = {"success": passed, "tool_calls": 0.0, "invalid_actions": 0.0, "turns": 1.0}
    metrics |= {"response_tokens": 1.0, f"env/accuracy@{category}": passed}
    return Trajectory(
        token_ids=[1], loss_mask=[1], logprobs=[0.0], prompt_length=0, metrics=metrics
    )


def test_an_evaluations_summary_carries_bfcls_non_live_score():
    """One episode per non-live category, two for simple_python (one fails): the summary's
    per-category accuracies and BFCL's aggregates of them."""
    passed = {"simple_java": 1.0, "multiple": 1.0, "irrelevance": 1.0}
    episodes = [_episode(c, passed.get(c, 0.0)) for c in NON_LIVE]
    episodes.append(_episode("simple_python", 1.0))
    summary = summarize(episodes, env_summary_metrics(load_config("bfcl", ["model.name=tiny"])))
    assert summary["env/accuracy@simple_python"] == 0.5
    assert summary["env/accuracy@non_live_simple_ast"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert summary["env/accuracy@non_live"] == pytest.approx((0.5 + 1.0 + 0 + 0) / 4)
    assert "env/accuracy@overall" not in summary and "env/accuracy@multi_turn" not in summary
    # the score is the BFCL envs' own (their class's summary_metrics): another env's run,
    # or a summary with no env's scores, has none
    calculator = env_summary_metrics(load_config("calculator_grpo", ["model.name=tiny"]))
    for other in (summarize(episodes, calculator), summarize(episodes)):
        assert "env/accuracy@non_live" not in other
        assert other["env/accuracy@simple_python"] == 0.5


def test_other_envs_subset_metrics_get_no_bfcl_score():
    assert summary_metrics({"env/accuracy@simple": 1.0, "env/score": 3.0}, {}) == {}

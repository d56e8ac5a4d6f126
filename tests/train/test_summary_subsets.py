"""Subset env metrics (`env/<metric>@<subset>`) average over the episodes that report them."""

from __future__ import annotations

from agentic_rl.train.summary import summarize
from agentic_rl.types import Trajectory

BASE = {
    "success": 0.0,
    "tool_calls": 0.0,
    "invalid_actions": 0.0,
    "turns": 1.0,
    "response_tokens": 1.0,
}


def _episode(**env: float) -> Trajectory:
    metrics = {**BASE, **{f"env/{k.replace('_at_', '@')}": v for k, v in env.items()}}
    return Trajectory(
        token_ids=[1], loss_mask=[1], logprobs=[0.0], prompt_length=0, metrics=metrics
    )


def test_subset_metric_is_the_rate_within_its_subset_and_plain_ones_over_all():
    episodes = [
        _episode(accuracy_at_simple=1.0, calls=2.0),
        _episode(accuracy_at_simple=0.0),
        _episode(accuracy_at_simple=1.0),
        _episode(accuracy_at_irrelevance=0.0, calls=1.0),
    ]
    summary = summarize(episodes)
    assert summary["env/accuracy@simple"] == 2 / 3  # 2 of the 3 simple episodes
    assert summary["env/accuracy@irrelevance"] == 0.0  # 0 of 1, not diluted by the others
    assert summary["env/calls"] == 0.75  # (2 + 1) / 4: a plain metric counts the silent ones 0

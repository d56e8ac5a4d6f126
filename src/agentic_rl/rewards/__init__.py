"""Reward functions (TRL-shaped: `fn(completions, **task_fields) -> list[float]`) and metrics."""

from agentic_rl.rewards.qa import (
    cover_exact_match,
    exact_match,
    exact_match_reward,
    extract_answer,
    f1_score,
    normalize_answer,
)

__all__ = [
    "cover_exact_match",
    "exact_match",
    "exact_match_reward",
    "extract_answer",
    "f1_score",
    "normalize_answer",
]

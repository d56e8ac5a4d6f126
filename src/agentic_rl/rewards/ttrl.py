"""TTRL rewards: the majority answer of N samples is the pseudo-label; no gold labels needed.

TTRL (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning"): sample N answers to a
prompt, take the majority vote y* (over canonical forms, so "0.5" and "\\frac{1}{2}" vote
together), and reward each sample r_i = 1 if answer_i == y* else 0. Where a gold answer exists
it is used only to log the label accuracy 1[y* == gold].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.algos.filters import majority_vote, majority_vote_rewards
from agentic_rl.rewards.math import extract_math_answer, math_equal, normalize_math, parse_number


def canonical_answer(completion: str) -> str | None:
    """The completion's final answer in a canonical form for voting, or None.

    Numbers become exact fractions ("0.50", "1/2", "\\frac{1}{2}" -> "1/2"; "3.0" -> "3");
    anything else is normalised LaTeX with spaces removed.
    """
    answer = extract_math_answer(completion)
    if answer is None or not answer.strip():
        return None
    normalized = normalize_math(answer)
    value = parse_number(normalized)
    if value is not None:
        return str(value)
    return normalized.replace(" ", "")


@dataclass
class TTRLResult:
    """Per-sample rewards, the pseudo-label and its vote share; `label_correct` is None without
    a gold answer."""

    rewards: list[float]
    label: str | None
    vote_share: float
    label_correct: float | None = None
    answers: list[str | None] = field(default_factory=list)


def ttrl_rewards(completions: Sequence[str], gold: Any = None) -> TTRLResult:
    """Majority-vote rewards for the N completions of one prompt (see the module docstring).

    Example: answers 4, 4, 5, none -> label "4", share 2/4 = 0.5, rewards [1, 1, 0, 0].
    """
    answers = [canonical_answer(c) for c in completions]
    label, share = majority_vote(answers)
    rewards = majority_vote_rewards(answers, label)
    label_correct = None
    if gold is not None:
        label_correct = float(label is not None and math_equal(label, str(gold)))
    return TTRLResult(rewards, label, share, label_correct, answers)


def ttrl_reward(completions: Sequence[str], **kwargs: Any) -> list[float]:
    """TRL-shaped wrapper: the completions of one prompt group -> their TTRL rewards."""
    return ttrl_rewards(completions).rewards

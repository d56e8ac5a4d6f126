"""Pure training-example selection: which candidate tasks to train on, from sampled rewards.

1-shot RLVR (Wang et al. 2025, "Reinforcement Learning for Reasoning in Large Language Models
with One Training Example", Sec. 2.2) ranks training examples by the variance of their
training accuracy and trains on the top one: an example the model sometimes solves gives a
GRPO group with unequal rewards, hence nonzero advantages, while an always-solved or
never-solved example gives none. No randomness, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Variances are compared rounded to this many decimals, so that p(1-p) and (1-p)p computed in
# different orders (e.g. 3/8 and 5/8 correct) tie exactly and the lower index wins.
_TIE_DECIMALS = 12


def reward_variance(rewards: Sequence[float]) -> float:
    """Population variance ``(1/n) sum_i (r_i - mean r)^2`` of one candidate's sampled rewards;
    ``p (1 - p)`` for 0/1 rewards with accuracy ``p``. 0.0 for fewer than two rewards (nothing
    can vary). Shapes: ``[n]`` -> float."""
    n = len(rewards)
    if n < 2:
        return 0.0
    mean = math.fsum(rewards) / n
    return math.fsum((r - mean) ** 2 for r in rewards) / n


def select_by_variance(rewards: Sequence[Sequence[float]], k: int = 1) -> list[int]:
    """Indices of the ``k`` candidates whose sampled rewards vary most (1-shot RLVR's rule, with
    the policy's current accuracy in place of the paper's historical one).

    ``rewards[c]`` holds the rewards of candidate ``c``'s samples (any count; an empty list,
    e.g. every sample lost to an infrastructure failure, has variance 0). Candidates are ranked
    by ``reward_variance`` descending, ties broken by the lowest index; the result is in rank
    order. When no candidate varies, this is ``[0, 1, ..., k-1]``: the first candidates.
    Shapes: ``[C][n_c]`` -> ``[k]`` indices. Raises ValueError unless ``1 <= k <= C``.
    """
    if not 1 <= k <= len(rewards):
        raise ValueError(f"k must be in [1, {len(rewards)}] (the candidates), got {k}")
    keys = [round(reward_variance(r), _TIE_DECIMALS) for r in rewards]
    return sorted(range(len(rewards)), key=lambda c: (-keys[c], c))[:k]

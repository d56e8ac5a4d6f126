"""1-shot RLVR's selection rule (algos/selection.py), computed by hand."""

from __future__ import annotations

import pytest

from agentic_rl.algos.selection import reward_variance, select_by_variance


def test_reward_variance_is_p_times_one_minus_p_for_0_1_rewards():
    assert reward_variance([1, 1, 1, 0]) == pytest.approx(0.75 * 0.25)  # p = 3/4: 0.1875
    assert reward_variance([1, 0, 0, 0, 0, 0, 0, 0]) == pytest.approx(1 / 8 * 7 / 8)  # 0.109375
    assert reward_variance([1, 1]) == reward_variance([0, 0, 0]) == 0.0
    assert reward_variance([1]) == reward_variance([]) == 0.0  # nothing can vary
    # graded rewards: mean 0.4, deviations -0.5, 0.1, 0.6, -0.2 -> (0.25+0.01+0.36+0.04)/4
    assert reward_variance([-0.1, 0.5, 1.0, 0.2]) == pytest.approx(0.165)


def test_select_by_variance_picks_the_half_solved_candidate():
    rewards = [
        [1, 1, 1, 1, 1, 1, 1, 1],  # p = 1: var 0 (the old recipe's example: zero advantages)
        [1, 0, 0, 0, 0, 0, 0, 0],  # p = 1/8: 0.109375
        [1, 1, 1, 0, 0, 0, 0, 0],  # p = 3/8: 0.234375
        [1, 1, 1, 1, 0, 0, 0, 0],  # p = 1/2: 0.25  <- the largest
        [0, 0, 0, 0, 0, 0, 0, 0],  # p = 0: var 0
    ]
    assert select_by_variance(rewards) == [3]
    assert select_by_variance(rewards, k=3) == [3, 2, 1]  # rank order


def test_ties_go_to_the_lowest_index():
    # p = 3/8 and p = 5/8 have the same p(1-p) = 15/64 whatever the summation order
    rewards = [[0, 0], [1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0, 0], [1, 1]]
    assert select_by_variance(rewards) == [1]
    assert select_by_variance(rewards, k=2) == [1, 2]
    # nothing varies: the first candidates, as without selection
    assert select_by_variance([[1, 1], [0, 0], []], k=2) == [0, 1]


def test_select_by_variance_rejects_k_outside_the_candidates():
    with pytest.raises(ValueError, match="k must be in"):
        select_by_variance([[1, 0]], k=2)
    with pytest.raises(ValueError, match="k must be in"):
        select_by_variance([[1, 0]], k=0)

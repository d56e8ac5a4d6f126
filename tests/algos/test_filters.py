"""Hand-computed checks for agentic_rl.algos.filters (DAPO, RAGEN StarPO-S, rStar2-Agent
GRPO-RoC and TTRL batch filters)."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.filters import (
    dynamic_sampling_keep,
    majority_vote,
    majority_vote_rewards,
    reward_variance_keep,
    roc_downsample,
    roc_penalties,
    useful_group_fraction,
)

F64 = torch.float64


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


# ------------------------------------------------------------------ DAPO dynamic sampling


def test_dynamic_sampling_keeps_only_groups_with_spread():
    # group 4: [1, 0, 1, 1] varies -> keep 0..3; group 1: [0, 0] constant -> drop;
    # group 9: [2, 5] varies -> keep 6, 7; group 0: singleton -> drop
    rewards = t([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 2.0, 5.0, 3.0])
    ids = torch.tensor([4, 4, 4, 4, 1, 1, 9, 9, 0])
    kept = dynamic_sampling_keep(rewards, ids)
    assert kept.dtype == torch.long
    assert kept.tolist() == [0, 1, 2, 3, 6, 7]
    assert useful_group_fraction(rewards, ids) == 0.5  # 2 of 4 groups


def test_dynamic_sampling_interleaved_ids_keep_batch_order():
    # group 2: [1, 0] (indices 0, 2) varies; group 5: [1, 1] (indices 1, 3) constant
    kept = dynamic_sampling_keep(t([1.0, 1.0, 0.0, 1.0]), torch.tensor([2, 5, 2, 5]))
    assert kept.tolist() == [0, 2]


def test_dynamic_sampling_all_constant_keeps_nothing():
    # spreads 0 and 1e-7 <= 1e-6 * max(1, |mean|): both count as constant
    rewards = t([1.0, 1.0, -1.0, -1.0 + 1e-7])
    ids = torch.tensor([0, 0, 1, 1])
    assert dynamic_sampling_keep(rewards, ids).tolist() == []
    assert useful_group_fraction(rewards, ids) == 0.0
    empty = torch.zeros(0, dtype=torch.long)
    assert dynamic_sampling_keep(t([]), empty).tolist() == []
    assert useful_group_fraction(t([]), empty) == 0.0


# ------------------------------------------------------------------- RAGEN StarPO-S filter


def _variance_batch():
    # unbiased stds: group 5 [0, 1] 0.707107; group 3 [0, 0] 0; group 9 [1, 0] 0.707107;
    # group 7 [0, 2] 1.414214; first appearance order 5, 3, 9, 7
    return t([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0]), torch.tensor([5, 5, 3, 3, 9, 9, 7, 7])


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (0.25, [6, 7]),  # ceil(0.25 * 4) = 1 group: 7
        (0.5, [0, 1, 6, 7]),  # 2 groups: 7, then the 5/9 tie -> 5 appears first
        (0.6, [0, 1, 4, 5, 6, 7]),  # ceil(2.4) = 3 groups: 7, 5, 9
        (1.0, [0, 1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_reward_variance_keep_top_groups_by_std(fraction, expected):
    rewards, ids = _variance_batch()
    assert reward_variance_keep(rewards, ids, fraction).tolist() == expected


def test_reward_variance_keep_default_and_singletons():
    # 3 groups -> ceil(0.25 * 3) = 1: group 1 [0, 3] (std 2.12) beats group 0 [1, 0] (0.707);
    # the singleton group 2 has std 0, not NaN
    kept = reward_variance_keep(t([1.0, 0.0, 0.0, 3.0, 9.0]), torch.tensor([0, 0, 1, 1, 2]))
    assert kept.tolist() == [2, 3]


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_reward_variance_keep_rejects_bad_fraction(fraction):
    rewards, ids = _variance_batch()
    with pytest.raises(ValueError):
        reward_variance_keep(rewards, ids, fraction)


# --------------------------------------------------------------------- rStar2-Agent RoC


def test_roc_penalties_hand_values():
    # p = p_err + p_format
    # 0: err 0,    1 answer, 3 turns             -> 0 + min(0/3, 1) = 0
    # 1: no tool,  1 answer                       -> 0.5 + 0 = 0.5
    # 2: err 0.25, 3 answers, 4 turns            -> 0.25 + 2/4 = 0.75
    # 3: err 0.5,  no answer                      -> 0.5 + 1 = 1.5
    # 4: err 0,    1 answer but unbalanced tags   -> 0 + 1 = 1
    # 5: err 1,    5 answers, 2 turns            -> 1 + min(4/2, 1) = 2
    # 6: err 0,    2 answers, 0 turns (-> 1)     -> 0 + min(1/1, 1) = 1
    out = roc_penalties(
        t([0.0, math.nan, 0.25, 0.5, 0.0, 1.0, 0.0]),
        torch.tensor([1, 1, 3, 0, 1, 5, 2]),
        torch.tensor([3, 2, 4, 2, 1, 2, 0]),
        torch.tensor([True, True, True, True, False, True, True]),
    )
    close(out, [0.0, 0.5, 0.75, 1.5, 1.0, 2.0, 1.0])


def test_roc_downsample_keeps_proportions_and_cleanest_positives():
    # N = 10: positives 0, 2, 3, 5, 8, 9 (6), negatives 1, 4, 6, 7 (4); M = 5
    # k_pos = round(5 * 6 / 10) = 3, k_neg = 2
    # positive penalties: idx0 0.9, idx2 0.1, idx3 0.5, idx5 0.1, idx8 2.0, idx9 0.3
    #   ascending (stable): 2 (0.1), 5 (0.1), 9 (0.3) -> kept; negatives: first two, 1 and 4
    rewards = t([1, 0, 1, 1, 0, 1, 0, 0, 1, 1])
    penalties = t([0.9, 0.0, 0.1, 0.5, 0.0, 0.1, 0.0, 0.0, 2.0, 0.3])
    assert roc_downsample(rewards, penalties, 5).tolist() == [1, 2, 4, 5, 9]


def test_roc_downsample_rounds_half_up():
    # N = 8, 5 positives (0..4), M = 4: 4 * 5 / 8 = 2.5 -> 3 positives, 1 negative (min 1)
    rewards = t([1, 1, 1, 1, 1, 0, 0, 0])
    penalties = t([0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0])
    assert roc_downsample(rewards, penalties, 4, min_per_class=1).tolist() == [2, 3, 4, 5]
    # with the default min_per_class = 2 the negatives are raised to 2: 2 positives (3, 4)
    assert roc_downsample(rewards, penalties, 4).tolist() == [3, 4, 5, 6]


def test_roc_downsample_group_with_only_positives_keeps_the_cleanest():
    # all positive, M = 3: penalties 0.5, 0.0, 1.0, 0.0, 2.0, 0.25 -> 1, 3 (tie, batch order), 5
    rewards = t([1.0] * 6)
    penalties = t([0.5, 0.0, 1.0, 0.0, 2.0, 0.25])
    assert roc_downsample(rewards, penalties, 3).tolist() == [1, 3, 5]


def test_roc_downsample_fewer_than_min_per_class_available():
    # N = 16, one positive (idx 4): round(4 * 1 / 16) = 0 -> raised to min(2, 1) = 1;
    # negatives fill the other 3 slots in batch order
    rewards = torch.zeros(16, dtype=F64)
    rewards[4] = 1.0
    assert roc_downsample(rewards, torch.zeros(16, dtype=F64), 4).tolist() == [0, 1, 2, 4]
    # all negative: M negatives in batch order
    assert roc_downsample(torch.zeros(6), torch.zeros(6), 4).tolist() == [0, 1, 2, 3]


def test_roc_downsample_small_group_keeps_everything():
    rewards, penalties = t([1.0, 0.0, 1.0]), t([0.3, 0.0, 0.1])
    assert roc_downsample(rewards, penalties, 4).tolist() == [0, 1, 2]
    assert roc_downsample(t([]), t([]), 4).tolist() == []


def test_roc_downsample_generator_samples_negatives_uniformly_and_reproducibly():
    # 4 positives (0..3, penalties 0..0.3), 12 negatives (4..15); M = 8 -> 2 pos, 6 neg
    rewards = t([1.0] * 4 + [0.0] * 12)
    penalties = t([0.0, 0.1, 0.2, 0.3] + [0.0] * 12)
    kept = roc_downsample(rewards, penalties, 8, generator=torch.Generator().manual_seed(3))
    again = roc_downsample(rewards, penalties, 8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(kept, again)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(3))[:6] + 4
    assert kept.tolist() == [0, 1, *sorted(perm.tolist())]
    seen = set()
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        seen |= set(roc_downsample(rewards, penalties, 8, generator=g)[2:].tolist())
    assert seen == set(range(4, 16))  # not just the first 6 negatives


def test_roc_downsample_validates_sizes():
    mixed = t([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError):
        roc_downsample(mixed, torch.zeros(8), 3)  # 2 positives + 2 negatives do not fit in 3
    assert roc_downsample(mixed, torch.zeros(8), 3, min_per_class=1).tolist() == [0, 2, 3]
    with pytest.raises(ValueError):
        roc_downsample(torch.zeros(8), torch.zeros(8), 4, min_per_class=-1)


# -------------------------------------------------------------------------- TTRL majority


def test_majority_vote_label_share_and_rewards():
    answers = ["4", "5", "4", None, "5", "4"]
    # "4": 3 votes of 6 samples (the None sample counts in the share, not in the vote)
    assert majority_vote(answers) == ("4", 0.5)
    assert majority_vote_rewards(answers, "4") == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]


def test_majority_vote_tie_goes_to_first_seen_and_empty_cases():
    assert majority_vote(["b", "a", "a", "b"]) == ("b", 0.5)
    assert majority_vote([None, "x"]) == ("x", 0.5)
    assert majority_vote([None, None]) == (None, 0.0)
    assert majority_vote([]) == (None, 0.0)
    assert majority_vote_rewards([None, "a"], None) == [0.0, 0.0]

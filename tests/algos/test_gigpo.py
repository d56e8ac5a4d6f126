"""Hand-computed checks for agentic_rl.algos.gigpo (GiGPO, Feng et al. 2025)."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.gigpo import (
    GIGPO_NORMS,
    anchor_groups,
    discounted_step_returns,
    episode_advantages,
    gigpo_advantages,
    step_advantages,
)

F64 = torch.float64


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


# ------------------------------------------------------------------------- step returns


def test_discounted_step_returns_default_gamma():
    # gamma 0.95, rewards [0, 0, 1]: R_2 = 1, R_1 = 0.95, R_0 = 0.95^2 = 0.9025
    (out,) = discounted_step_returns([[0.0, 0.0, 1.0]])
    assert out == pytest.approx([0.9025, 0.95, 1.0])


def test_discounted_step_returns_ragged_episodes():
    # gamma 0.5: [1, 2] -> R_1 = 2, R_0 = 1 + 0.5 * 2 = 2; [-0.1, 0, 1] -> 1, 0.5, -0.1 + 0.25;
    # an empty episode stays empty
    out = discounted_step_returns([[1.0, 2.0], [], [-0.1, 0.0, 1.0]], gamma=0.5)
    assert out[0] == pytest.approx([2.0, 2.0])
    assert out[1] == []
    assert out[2] == pytest.approx([0.15, 0.5, 1.0])


# ------------------------------------------------------------------------- anchor groups


def test_anchor_groups_exact_within_episode_groups_only():
    # group 0: s0 -> 0, s1 -> 1, s0 -> 0; group 1 (same strings) gets new ids: s1 -> 2, s0 -> 3
    anchors = ["s0", "s1", "s0", "s1", "s0"]
    assert anchor_groups(anchors, [0, 0, 0, 1, 1]) == [0, 1, 0, 2, 3]


def test_anchor_groups_accepts_any_hashable_anchor():
    anchors = [(1, 2), (1, 2), (2, 1), 7, 7]
    assert anchor_groups(anchors, ["a", "a", "a", "a", "b"]) == [0, 0, 1, 2, 3]


def test_anchor_groups_similarity_joins_the_first_members_group_greedily():
    rep = "abcdefghijklmnopqrst"  # 20 characters
    near = "abcdefghijklmnopqrsX"  # vs rep: 19 matching chars -> 2 * 19 / 40 = 0.95 -> joins
    far = "abcdefghijklmnopqrXY"  # vs rep: 18 -> 0.90 (vs near 0.95, but near is not the rep)
    anchors = [rep, near, far, near, far, rep]
    # threshold 0.95: rep -> 0, near -> 0, far -> 1 (new), near -> 0 (exact), far -> 1, rep -> 0
    assert anchor_groups(anchors, [0] * 6, similarity_threshold=0.95) == [0, 0, 1, 0, 1, 0]
    # threshold 0.9: far also joins group 0
    assert anchor_groups(anchors, [0] * 6, similarity_threshold=0.9) == [0] * 6
    # no threshold: exact matching only
    assert anchor_groups(anchors, [0] * 6) == [0, 1, 2, 1, 2, 0]


def test_anchor_groups_similarity_never_crosses_episode_groups_or_non_strings():
    anchors = ["abcdefghijklmnopqrst", "abcdefghijklmnopqrsX", (1,), (1,), 3]
    assert anchor_groups(anchors, [0, 1, 1, 1, 1], similarity_threshold=0.5) == [0, 1, 2, 2, 3]


def test_anchor_groups_validates_inputs():
    with pytest.raises(ValueError):
        anchor_groups(["a"], [0, 0])
    with pytest.raises(ValueError):
        anchor_groups(["a"], [0], similarity_threshold=0.0)
    with pytest.raises(ValueError):
        anchor_groups(["a"], [0], similarity_threshold=1.5)


# ------------------------------------------------------------------- episode / step advantages


def test_episode_advantages_hand_values_both_norms():
    # step samples of 2 episodes x 3 steps, episode returns 1 and 0 in one group:
    # mean 0.5, sq dev 6 * 0.25 = 1.5, unbiased var 1.5 / 5 = 0.3
    # -> A_E = +-0.5 / 0.547723 = +-0.912871
    rewards = t([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    ids = torch.tensor([0] * 6)
    a = 0.5 / math.sqrt(0.3)
    close(episode_advantages(rewards, ids, "mean_std_norm", eps=0.0), [a, a, a, -a, -a, -a])
    close(episode_advantages(rewards, ids, "mean_norm"), [0.5, 0.5, 0.5, -0.5, -0.5, -0.5])


def test_episode_advantages_degenerate_groups_and_lists():
    # group 3 constant [2, 2] -> 0; group 8 singleton -> 0; group 1 [1, 0] -> +-0.5 (mean_norm)
    out = episode_advantages([2.0, 1.0, 2.0, 4.0, 0.0], [3, 1, 3, 8, 1], "mean_norm")
    close(out, [0.0, 0.5, 0.0, 0.0, -0.5])


def test_step_advantages_singletons_and_constants_are_zero():
    # step group 0: returns [0.25, 0] -> mean 0.125, unbiased std sqrt(2 * 0.015625) = 0.176777
    #   -> +-0.707107; group 1 singleton -> 0; group 2 constant [0.5, 0.5] -> 0
    returns = t([0.25, 0.9, 0.0, 0.5, 0.5])
    ids = torch.tensor([0, 1, 0, 2, 2])
    r = 1 / math.sqrt(2.0)
    close(step_advantages(returns, ids, eps=0.0), [r, 0.0, -r, 0.0, 0.0])
    close(step_advantages(returns, ids, "mean_norm"), [0.125, 0.0, -0.125, 0.0, 0.0])


@pytest.mark.parametrize("fn", [episode_advantages, step_advantages])
def test_unknown_norm_raises(fn):
    assert GIGPO_NORMS == ("mean_std_norm", "mean_norm")
    with pytest.raises(ValueError, match="'std_only'"):
        fn(t([1.0, 0.0]), torch.tensor([0, 0]), "std_only")


# ----------------------------------------------------------------------- full GiGPO example


def _two_episode_example():
    # one task, 2 episodes x 3 steps; both start from the anchor s0 (a shared step group)
    # episode A: anchors s0, s1, s2, rewards 0, 0, 1 -> R = 1; returns (gamma 0.5) 0.25, 0.5, 1
    # episode B: anchors s0, s3, s4, rewards 0, 0, 0 -> R = 0; returns 0, 0, 0
    step_rewards = [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    anchors = ["s0", "s1", "s2", "s0", "s3", "s4"]
    returns = [r for ep in discounted_step_returns(step_rewards, gamma=0.5) for r in ep]
    episode_return = [sum(ep) for ep in step_rewards for _ in ep]
    return anchors, returns, episode_return


def test_gigpo_two_episodes_three_steps_shared_anchor():
    anchors, returns, episode_return = _two_episode_example()
    assert returns == pytest.approx([0.25, 0.5, 1.0, 0.0, 0.0, 0.0])
    group_ids = [0] * 6
    step_groups = anchor_groups(anchors, group_ids)
    assert step_groups == [0, 1, 2, 0, 3, 4]
    # A_E = +-0.912871 (see test_episode_advantages_hand_values_both_norms)
    # A_S: step group 0 = returns {0.25, 0} -> +-0.707107 (mean_std_norm); singletons -> 0
    a, s = 0.5 / math.sqrt(0.3), 1 / math.sqrt(2.0)
    out = gigpo_advantages(
        t(episode_return), torch.tensor(group_ids), t(returns), torch.tensor(step_groups), eps=0.0
    )
    close(out, [a + s, a, a, -a - s, -a, -a])  # 1.619978, 0.912871, ..., -1.619978
    # mean_norm, omega 0.5: A_E = +-0.5, A_S = +-0.125 -> +-(0.5 + 0.0625)
    out = gigpo_advantages(
        episode_return, group_ids, returns, step_groups, omega=0.5, norm="mean_norm"
    )
    assert out.dtype == torch.float32
    close(out, [0.5625, 0.5, 0.5, -0.5625, -0.5, -0.5])


def test_gigpo_omega_zero_is_episode_advantage_and_identical_episodes_give_zero():
    anchors, returns, episode_return = _two_episode_example()
    step_groups = anchor_groups(anchors, [0] * 6)
    ids = torch.tensor([0] * 6)
    out = gigpo_advantages(t(episode_return), ids, t(returns), torch.tensor(step_groups), omega=0)
    torch.testing.assert_close(out, episode_advantages(t(episode_return), ids))
    # two identical episodes: every group is constant -> exactly 0 everywhere
    same = gigpo_advantages(
        t([1.0] * 6), ids, t([0.25, 0.5, 1.0] * 2), torch.tensor([0, 1, 2, 0, 1, 2])
    )
    assert torch.equal(same, torch.zeros(6, dtype=F64))

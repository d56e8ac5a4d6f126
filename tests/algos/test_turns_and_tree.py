"""Turn-level credit (MT-GRPO, turn GAE) and tree credit (Tree-GRPO, ARPO), by hand."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.algos.tree import (
    arpo_branch,
    normalised_topk_entropy,
    response_span,
    tree_2norm_advantages,
    tree_grpo_advantages,
    tree_inner_advantages,
    tree_per_token_advantages,
)
from agentic_rl.algos.turns import (
    last_turn_rewards,
    mt_grpo_token_advantages,
    turn_gae,
    turn_group_advantages,
    turn_slots,
    turn_start_mask,
    turn_sums,
    turn_to_token_advantages,
    turn_values,
)


def test_turn_group_advantages_normalise_each_turn_index_within_its_group() -> None:
    # group 0: rows 0, 1, 2; group 1: row 3. Turn 0 rewards 1, 0, 0.5; turn 1 only rows 0 and 1
    # (row 2 ended after one turn) with rewards 2, 2 (constant -> 0).
    rewards = torch.tensor([[1.0, 2.0], [0.0, 2.0], [0.5, 9.0], [3.0, 0.0]])
    present = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 0]])
    groups = torch.tensor([7, 7, 7, 4])
    adv = turn_group_advantages(rewards, present, groups)
    # turn 0 of group 7: mean 0.5, unbiased std 0.5 -> (1, -1, 0); row 3 is a singleton -> 0
    expected = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    assert torch.allclose(adv, expected, atol=1e-5)
    # the absent turn's reward (9.0) never entered a mean: row 2's turn 1 stays 0
    assert adv[2, 1] == 0


def test_mt_grpo_adds_turn_credit_before_the_last_turn_only() -> None:
    # one row, two turns: tokens [prompt, t0, t0, obs, t1, t1]
    turn_ids = torch.tensor([[-1, 0, 0, -1, 1, 1]])
    mask = torch.tensor([[0, 1, 1, 0, 1, 1]])
    out = mt_grpo_token_advantages(
        outcome_adv=torch.tensor([0.5]),
        turn_adv=torch.tensor([[2.0, 100.0]]),
        turn_ids=turn_ids,
        mask=mask,
        last_turn=torch.tensor([1]),
        turn_coef=0.25,
    )
    # turn 0: 0.5 + 0.25 * 2 = 1.0; the last turn keeps the outcome advantage only
    assert torch.equal(out, torch.tensor([[0.0, 1.0, 1.0, 0.0, 0.5, 0.5]]))


def test_last_turn_rewards_are_the_outcome_apart_from_earlier_turns() -> None:
    turn_rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 2.0], [9.0, 0.0, 0.0]])
    num_turns = torch.tensor([2, 3, 0])
    rewards = torch.tensor([1.0, 2.5, 7.0])
    # row 0: its second turn's 0.0; row 1: its third turn's 2.0; row 2 has no turn: its reward
    out = last_turn_rewards(turn_rewards, num_turns, rewards)
    assert out.tolist() == [0.0, 2.0, 7.0]


def test_turn_sums_add_each_turns_tokens() -> None:
    x = torch.tensor([[0.5, 0.1, 0.2, 9.0, 0.3], [1.0, 2.0, 0.0, 0.0, 0.0]])
    ids = torch.tensor([[-1, 0, 0, -1, 1], [0, 0, -1, -1, -1]])
    # row 0: turn 0 = 0.1 + 0.2, turn 1 = 0.3 (the -1 tokens 0.5 and 9.0 count nowhere)
    assert torch.allclose(turn_sums(x, ids, 3), torch.tensor([[0.3, 0.3, 0.0], [3.0, 0, 0]]))


def test_turn_gae_by_hand() -> None:
    # two turns, gamma 0.5, lam 0.5: r = (1, 2), V = (0.5, 1)
    # delta_1 = 2 - 1 = 1; A_1 = 1
    # delta_0 = 1 + 0.5 * 1 - 0.5 = 1; A_0 = 1 + 0.25 * 1 = 1.25
    # a second row with one turn: r = 3, V = 1 -> A = 2; its absent slot is 0
    adv, ret = turn_gae(
        torch.tensor([[1.0, 2.0], [3.0, 5.0]]),
        torch.tensor([[0.5, 1.0], [1.0, 7.0]]),
        torch.tensor([[1, 1], [1, 0]]),
        gamma=0.5,
        lam=0.5,
    )
    assert torch.allclose(adv, torch.tensor([[1.25, 1.0], [2.0, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[1.75, 2.0], [3.0, 0.0]]))


def test_turn_to_token_advantages_fill_each_turn() -> None:
    out = turn_to_token_advantages(
        torch.tensor([[1.5, -2.0]]),
        torch.tensor([[-1, 0, 0, -1, 1]]),
        torch.tensor([[0, 1, 1, 0, 1]]),
    )
    assert torch.equal(out, torch.tensor([[0.0, 1.5, 1.5, 0.0, -2.0]]))


def test_turn_starts_are_each_turns_first_trained_token() -> None:
    # row 0: turn 0 begins with an inserted token (mask 0), turn 1 is all inserted (no start);
    # row 1: one turn; padding is -1
    turn_ids = torch.tensor([[-1, 0, 0, 0, -1, 1, 1], [-1, 0, 0, -1, -1, -1, -1]])
    mask = torch.tensor([[0, 0, 1, 1, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0]])
    starts = turn_start_mask(turn_ids, mask)
    assert starts.tolist() == [
        [False, False, True, False, False, False, False],
        [False, True, False, False, False, False, False],
    ]
    values = torch.tensor([[9.0, 9.0, 0.25, 7.0, 9.0, 9.0, 9.0], [9.0, -0.5, 3.0, 9, 9, 9, 9]])
    # the turn without a trained token has value 0
    assert turn_values(values, turn_ids, starts, 2).tolist() == [[0.25, 0.0], [-0.5, 0.0]]
    assert not turn_start_mask(torch.full((1, 3), -1), torch.ones(1, 3)).any()


def test_turn_slots() -> None:
    assert turn_slots(torch.tensor([2, 0, 3]), 3).tolist() == [
        [True, True, False],
        [False, False, False],
        [True, True, True],
    ]


def test_tree_grpo_is_inter_plus_intra() -> None:
    # one task, two trees of two leaves: rewards (1, 0 | 1, 1)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    adv = tree_grpo_advantages(rewards, torch.tensor([0, 0, 0, 0]), torch.tensor([0, 0, 1, 1]))
    # inter (all four leaves): mean 0.75, unbiased std sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5
    #   -> (0.5, -1.5, 0.5, 0.5); intra tree 0: mean 0.5, std sqrt(0.5) -> (+-0.70711);
    #   tree 1 is constant -> 0
    expected = torch.tensor([0.5 + 0.70711, -1.5 - 0.70711, 0.5, 0.5])
    assert torch.allclose(adv, expected, atol=1e-4)


# One task, three trees: (1, 0 | 1, 0 | 0), the last a tree of one leaf (as ARPO's can be).
VARIANT_REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
VARIANT_GROUPS = torch.zeros(5, dtype=torch.long)
VARIANT_TREES = torch.tensor([0, 0, 1, 1, 2])


def test_tree_inner_is_grpo_within_each_tree() -> None:
    # trees (1, 0): mean 0.5, unbiased std sqrt(0.5) -> +-0.70711; a lone leaf: 0
    adv = tree_inner_advantages(VARIANT_REWARDS, VARIANT_TREES)
    assert adv.tolist() == pytest.approx([0.70711, -0.70711, 0.70711, -0.70711, 0.0], abs=1e-4)


def test_tree_2norm_normalises_over_the_task_then_over_the_tree() -> None:
    adv = tree_2norm_advantages(VARIANT_REWARDS, VARIANT_GROUPS, VARIANT_TREES)
    # first pass over the task: mean 0.4, unbiased std sqrt((2 x 0.36 + 3 x 0.16) / 4) =
    #   sqrt(0.3) = 0.54772 -> S = (1.09545, -0.73030, 1.09545, -0.73030, -0.73030);
    # second pass per tree: (1.09545, -0.73030) has mean 0.18257 and std 1.29099 -> +-0.70711;
    # the lone leaf keeps S (the reference's mean-0, std-1 rule for one sample)
    expected = [0.70711, -0.70711, 0.70711, -0.70711, -0.73030]
    assert adv.tolist() == pytest.approx(expected, abs=1e-4)
    # with the task as one group, S is an affine map of R: the trees of two or more leaves get
    # tree_inner's values
    inner = tree_inner_advantages(VARIANT_REWARDS, VARIANT_TREES)
    torch.testing.assert_close(adv[:4], inner[:4], atol=1e-5, rtol=0)
    # a tree whose leaves tie gets 0 in the second pass, however it stands in the task
    tied = tree_2norm_advantages(
        torch.tensor([1.0, 1.0, 0.0, 0.0]),
        torch.zeros(4, dtype=torch.long),
        torch.tensor([0, 0, 1, 1]),
    )
    assert tied.tolist() == [0.0, 0.0, 0.0, 0.0]


# Three rows of T = 6; 1 = trained token, o = observation, p = prompt, . = padding.
#   row 0 (tree 0, R = 1): p 1 1 o 1 .   -> response = positions 1..4, R on position 4
#   row 1 (tree 0, R = 0): p p 1 o . .   -> response = 2..3 (a trailing observation)
#   row 2 (tree 1, R = 1): p 1 1 . . .   -> response = 1..2, R on position 2
SPAN_MASK = torch.tensor(
    [[0, 1, 1, 0, 1, 0], [0, 0, 1, 0, 0, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.float32
)
SPAN_ATTENTION = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])


def test_response_span_runs_from_the_first_trained_token_to_the_last_real_one() -> None:
    span = response_span(SPAN_MASK, SPAN_ATTENTION)
    assert span.int().tolist() == [[0, 1, 1, 1, 1, 0], [0, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 0]]
    # a row without a trained token has no response
    assert not response_span(torch.zeros(1, 3), torch.ones(1, 3)).any()


def test_tree_per_token_pools_the_response_tokens() -> None:
    response = response_span(SPAN_MASK, SPAN_ATTENTION)
    adv = tree_per_token_advantages(
        torch.tensor([1.0, 0.0, 1.0]), response, torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])
    )
    # task pool, 8 tokens (0 0 0 1 | 0 0 | 0 1): mean 0.25, unbiased std sqrt(1.5 / 7) = 0.46291
    #   -> a 0 token -0.54006, a 1 token 1.62018
    # tree 0 pool, 6 tokens (0 0 0 1 | 0 0): mean 1/6, std sqrt(1/6) = 0.40825
    #   -> 0 token -0.40825, 1 token 2.04124
    # tree 1 pool, 2 tokens (0 1): mean 0.5, std sqrt(0.5) -> -+0.70711
    zero0, one0 = -0.54006 - 0.40825, 1.62018 + 2.04124
    zero1, one1 = -0.54006 - 0.70711, 1.62018 + 0.70711
    expected = [
        [0, zero0, zero0, zero0, one0, 0],  # the observation at 3 is in the pool too
        [0, 0, zero0, zero0, 0, 0],
        [0, zero1, one1, 0, 0, 0],
    ]
    assert adv.tolist() == [pytest.approx(row, abs=1e-4) for row in expected]
    # every leaf of the task failed: every pool is constant -> 0
    none = tree_per_token_advantages(
        torch.zeros(3), response, torch.tensor([0, 0, 0]), torch.tensor([0, 0, 1])
    )
    assert (none == 0).all()


def test_normalised_topk_entropy_by_hand() -> None:
    # two equal logprobs -> p = (0.5, 0.5), H = log 2; over log |V| = log 4 -> 0.5
    h = normalised_topk_entropy(torch.tensor([[-3.0, -3.0], [-1.0, -1.0]]), vocab_size=4)
    assert h.item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="vocab_size"):
        normalised_topk_entropy(torch.zeros(1, 2), vocab_size=1)


def test_arpo_branches_more_when_entropy_rises() -> None:
    u = torch.tensor([0.6, 0.6, 0.6, 0.3])
    delta = torch.tensor([0.0, 1.0, 5.0, -10.0])
    # p = clamp(u - 0.2 * dH): 0.6, 0.4, 0 (clamped), 1 (clamped); threshold 0.5
    assert arpo_branch(delta, u, entropy_weight=0.2, threshold=0.5).tolist() == [
        False,
        True,
        True,
        False,
    ]

"""Turn-level credit (MT-GRPO, turn GAE) and tree credit (Tree-GRPO, ARPO), by hand."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.algos.tree import (
    arpo_branch,
    normalised_topk_entropy,
    tree_grpo_advantages,
)
from agentic_rl.algos.turns import (
    mt_grpo_token_advantages,
    turn_gae,
    turn_group_advantages,
    turn_slots,
    turn_start_mask,
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

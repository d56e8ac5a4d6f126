"""The advantage-estimator table (agentic_rl.algos.estimators): every entry runs through the one
signature the learner calls, gives what its math function gives, and its flags say what it
needs."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.algos.advantages import (
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    outcome_to_token_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    trr_pp_advantages,
    whiten_advantages,
)
from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs, Estimator
from agentic_rl.algos.gigpo import gigpo_advantages
from agentic_rl.algos.turns import (
    mt_grpo_token_advantages,
    turn_gae,
    turn_group_advantages,
    turn_to_token_advantages,
)

REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 0.0])
GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])
MASK = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 0, 1]]).float()
# turn of each token (-1 off turns) and each row's turn rewards: rows 2 and 4 have one turn
TURN_IDS = torch.tensor([[0, 1, -1], [-1, 0, 1], [0, -1, -1], [0, 0, 1], [0, -1, -1], [0, -1, 1]])
NUM_TURNS = torch.tensor([2, 2, 1, 2, 1, 2])
TURN_REWARDS = torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.5, 0.0], [1.0, -0.5], [2.0, 0.0], [0.0, 0]])


def inputs(**kw) -> AdvantageInputs:
    base = {
        "rewards": REWARDS,
        "mask": MASK,
        "group_ids": GROUPS,
        "token_rewards": torch.zeros(6, 3).index_put_(
            (torch.arange(6), torch.tensor([1] * 6)), REWARDS
        ),
        "values": torch.full((6, 3), 0.25) * MASK,
        "step_returns": REWARDS * 0.5,
        "step_group_ids": torch.tensor([0, 0, 1, 2, 3, 3]),
        "turn_ids": TURN_IDS,
        "turn_rewards": TURN_REWARDS,
        "num_turns": NUM_TURNS,
        "attention": torch.ones(6, 3, dtype=torch.long),
    }
    return AdvantageInputs(**{**base, **kw})


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_every_entry_runs_masked_and_detached(name):
    adv, returns = ADVANTAGE_ESTIMATORS[name].fn(inputs(rewards=REWARDS.clone().requires_grad_()))
    assert adv.shape == MASK.shape and not adv.requires_grad
    assert torch.equal(adv[MASK == 0], torch.zeros_like(adv[MASK == 0]))
    assert (returns is not None) == ADVANTAGE_ESTIMATORS[name].needs_value_head
    if ADVANTAGE_ESTIMATORS[name].sequence_level:  # one value per row
        per_row = adv.sum(1) / MASK.sum(1)
        assert torch.allclose(adv, outcome_to_token_advantages(per_row, MASK))


@pytest.mark.parametrize(
    ("name", "fn"),
    [("grpo", grpo_advantages), ("dr_grpo", dr_grpo_advantages), ("rloo", rloo_advantages)],
)
def test_group_entries_are_their_functions_and_share_an_episode_advantage(name, fn):
    adv, _ = ADVANTAGE_ESTIMATORS[name].fn(inputs())
    torch.testing.assert_close(adv, outcome_to_token_advantages(fn(REWARDS, GROUPS), MASK))
    # rows 0-1 one episode, 2-3 another, ...: one advantage per episode, from its first row
    episodes = inputs(episode_index=torch.tensor([7, 7, 3, 3, 9, 9]), group_ids=torch.zeros(6))
    adv, _ = ADVANTAGE_ESTIMATORS[name].fn(episodes)
    per_episode = fn(REWARDS[[0, 2, 4]], torch.zeros(3, dtype=torch.long))
    expected = outcome_to_token_advantages(per_episode.repeat_interleave(2), MASK)
    torch.testing.assert_close(adv, expected)


def test_ppo_entry_is_whitened_gae_with_the_kl_reward():
    kl = torch.full((6, 3), 0.1) * MASK
    x = inputs(kl=kl, kl_coef=0.5, gamma=0.9, lam=0.8)
    adv, returns = ADVANTAGE_ESTIMATORS["ppo"].fn(x)
    gae, ret = gae_advantages(x.token_rewards - 0.05 * MASK, x.values, MASK, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, whiten_advantages(gae, MASK))
    torch.testing.assert_close(returns, ret)
    with pytest.raises(ValueError, match="ppo needs old values"):
        ADVANTAGE_ESTIMATORS["ppo"].fn(inputs(values=None))


def test_reinforce_pp_entry_takes_the_kl_only_when_given():
    kl = torch.full((6, 3), 0.2) * MASK
    adv, _ = ADVANTAGE_ESTIMATORS["reinforce_pp"].fn(inputs(kl=kl, kl_coef=0.5, gamma=0.9))
    torch.testing.assert_close(adv, reinforce_pp_advantages(REWARDS, MASK, kl, 0.5, gamma=0.9))
    adv, _ = ADVANTAGE_ESTIMATORS["reinforce_pp"].fn(inputs(kl_coef=0.5))
    torch.testing.assert_close(adv, reinforce_pp_advantages(REWARDS, MASK, None, 0.0))


def test_gigpo_entry_needs_step_groups():
    x = inputs(gigpo_omega=0.5, gigpo_norm="mean_norm")
    adv, _ = ADVANTAGE_ESTIMATORS["gigpo"].fn(x)
    expected = gigpo_advantages(
        REWARDS, GROUPS, x.step_returns, x.step_group_ids, omega=0.5, norm="mean_norm"
    )
    torch.testing.assert_close(adv, outcome_to_token_advantages(expected, MASK))
    with pytest.raises(ValueError, match="gigpo needs step returns"):
        ADVANTAGE_ESTIMATORS["gigpo"].fn(inputs(step_returns=None))


def test_trr_pp_entry_defaults_to_one_bucket():
    adv, _ = ADVANTAGE_ESTIMATORS["trr_pp"].fn(inputs())
    zeros = torch.zeros(6, dtype=torch.long)
    torch.testing.assert_close(adv, trr_pp_advantages(REWARDS, zeros, zeros, MASK))
    types = torch.tensor([0, 0, 1, 1, 1, 1])
    adv, _ = ADVANTAGE_ESTIMATORS["trr_pp"].fn(inputs(task_type_ids=types))
    torch.testing.assert_close(adv, trr_pp_advantages(REWARDS, types, zeros, MASK))


def test_mt_grpo_entry_is_outcome_plus_turn_advantages_before_the_last_turn():
    adv, returns = ADVANTAGE_ESTIMATORS["mt_grpo"].fn(inputs(turn_coef=0.5))
    assert returns is None
    # only the turns before each row's last enter the per-turn-index groups
    earlier = torch.tensor([[1, 0], [1, 0], [0, 0], [1, 0], [0, 0], [1, 0]])
    turn_adv = turn_group_advantages(TURN_REWARDS, earlier, GROUPS)
    expected = mt_grpo_token_advantages(
        grpo_advantages(REWARDS, GROUPS), turn_adv, TURN_IDS, MASK, NUM_TURNS - 1, turn_coef=0.5
    )
    torch.testing.assert_close(adv, expected)
    # group 0's first turns (0.5 vs 0.0) differ: the turn term moves them; group 1's row 3 is
    # the only one with a turn before its last: a singleton, no turn advantage
    assert adv[0, 0] > adv[0, 1] and adv[1, 1] < adv[1, 2]
    assert adv[3, 0] == adv[3, 2]
    with pytest.raises(ValueError, match="mt_grpo needs the turns"):
        ADVANTAGE_ESTIMATORS["mt_grpo"].fn(inputs(turn_ids=None))


def test_turn_ppo_entry_is_whitened_turn_gae_read_at_turn_starts():
    values = torch.tensor([[0.1, 0.2, 0.0], [0.0, 0.3, 0.4], [0.5, 0.0, 0.0]] * 2)
    x = inputs(values=values, gamma=0.9, lam=0.8)
    adv, returns = ADVANTAGE_ESTIMATORS["turn_ppo"].fn(x)
    # turn starts: the first trained token of each turn
    starts = torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 0], [1, 0, 1], [1, 0, 0], [1, 0, 1]])
    positions = ADVANTAGE_ESTIMATORS["turn_ppo"].value_positions(x)
    assert torch.equal(positions, starts.bool())
    turn_v = torch.tensor([[0.1, 0.2], [0.3, 0.4], [0.5, 0.0], [0.1, 0.0], [0.0, 0.0], [0.5, 0.0]])
    present = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 0], [1, 1]])
    gae, ret = turn_gae(TURN_REWARDS, turn_v, present, gamma=0.9, lam=0.8)
    torch.testing.assert_close(
        adv, whiten_advantages(turn_to_token_advantages(gae, TURN_IDS, MASK), MASK)
    )
    torch.testing.assert_close(returns, turn_to_token_advantages(ret, TURN_IDS, starts))
    with pytest.raises(ValueError, match="turn_ppo needs old values"):
        ADVANTAGE_ESTIMATORS["turn_ppo"].fn(inputs(values=None))


def test_flags():
    def having(flag):
        return {name for name, e in ADVANTAGE_ESTIMATORS.items() if getattr(e, flag)}

    assert having("per_episode") == {"grpo", "dr_grpo", "rloo"}
    assert having("step_wise") == {"gigpo"}
    assert having("needs_value_head") == {"ppo", "turn_ppo"}
    assert having("turn_level") == {"mt_grpo", "turn_ppo"}
    assert having("turn_groups") == {"mt_grpo"}
    assert having("value_positions") == {"turn_ppo"}
    assert having("kl_reward") == {"ppo", "reinforce_pp", "turn_ppo"}
    assert having("task_buckets") == {"trr_pp"}
    assert having("needs_groups") == {
        "grpo",
        "dr_grpo",
        "rloo",
        "reinforce_pp_baseline",
        "gigpo",
        "tree_grpo",
        "tree_grpo_2norm",
        "tree_grpo_inner",
        "tree_grpo_per_token",
        "mt_grpo",
    }
    assert having("tree_groups") == {
        "tree_grpo",
        "tree_grpo_2norm",
        "tree_grpo_inner",
        "tree_grpo_per_token",
    }
    token_level = set(ADVANTAGE_ESTIMATORS) - having("sequence_level")
    assert token_level == {"ppo", "reinforce_pp", "mt_grpo", "turn_ppo", "tree_grpo_per_token"}
    assert having("discounted") == {"ppo", "reinforce_pp", "turn_ppo"}
    # Dr. GRPO's constant normaliser is its own; the others have none (the config's default)
    aggregations = {name: e.loss_agg for name, e in ADVANTAGE_ESTIMATORS.items()}
    assert aggregations.pop("dr_grpo") == "seq-mean-token-sum-norm"
    assert set(aggregations.values()) == {""}
    assert all(isinstance(e, Estimator) for e in ADVANTAGE_ESTIMATORS.values())

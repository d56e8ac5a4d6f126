"""Advantages grouped per agent role (algo.role_groups), hand-computed."""

from __future__ import annotations

import dataclasses
import math

import torch

from agentic_rl.algos.advantages import dr_grpo_advantages, grpo_advantages
from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs
from agentic_rl.algos.roles import role_group_advantages, role_units

# One task group, two episodes; rows: ep0 solver, ep0 verifier, ep0 solver (a 2nd conversation),
# ep1 solver, ep1 verifier. Solver rewards 1 (ep0) and 0 (ep1); verifier 2 and 2.
REWARDS = torch.tensor([1.0, 2.0, 1.0, 0.0, 2.0])
GROUPS = torch.tensor([0, 0, 0, 0, 0])
AGENTS = torch.tensor([0, 1, 0, 0, 1])
EPISODES = torch.tensor([0, 0, 0, 1, 1])
S = 0.5 / math.sqrt(0.5)  # GRPO of (1, 0): mean 0.5, unbiased std sqrt(0.5)


def test_grpo_within_group_and_role():
    adv = role_group_advantages(REWARDS, GROUPS, AGENTS, EPISODES, grpo_advantages)
    torch.testing.assert_close(adv, torch.tensor([S, 0.0, S, -S, 0.0]), atol=1e-5, rtol=0)


def test_dr_grpo_and_separate_task_groups():
    groups = torch.tensor([0, 0, 0, 1, 1])  # each episode its own task: singleton buckets
    adv = role_group_advantages(REWARDS, groups, AGENTS, EPISODES, dr_grpo_advantages)
    assert torch.equal(adv, torch.zeros(5))
    adv = role_group_advantages(REWARDS, GROUPS, AGENTS, EPISODES, dr_grpo_advantages)
    torch.testing.assert_close(adv, torch.tensor([0.5, 0.0, 0.5, -0.5, 0.0]))


def test_a_role_absent_from_an_episode_is_not_in_its_bucket():
    # ep1 has no verifier: the verifier bucket holds ep0 alone (a singleton: 0)
    rewards, agents = torch.tensor([1.0, 3.0, 0.0]), torch.tensor([0, 1, 0])
    adv = role_group_advantages(
        rewards, torch.zeros(3), agents, torch.tensor([0, 0, 1]), grpo_advantages
    )
    torch.testing.assert_close(adv, torch.tensor([S, 0.0, -S]), atol=1e-5, rtol=0)


def test_estimators_use_role_groups_only_when_given_agent_ids():
    mask = torch.ones(5, 2)
    inputs = AdvantageInputs(rewards=REWARDS, mask=mask, group_ids=GROUPS, episode_index=EPISODES)
    matpo, _ = ADVANTAGE_ESTIMATORS["grpo"].fn(inputs)
    # MATPO: each episode's advantage from its first row (the solver's 1 vs 0), on every row
    torch.testing.assert_close(matpo[:, 0], torch.tensor([S, S, S, -S, -S]), atol=1e-5, rtol=0)
    grouped, _ = ADVANTAGE_ESTIMATORS["grpo"].fn(dataclasses.replace(inputs, agent_ids=AGENTS))
    torch.testing.assert_close(grouped[:, 1], torch.tensor([S, 0.0, S, -S, 0.0]), atol=1e-5, rtol=0)


def test_role_units_by_hand():
    # without agents a unit is an episode; with agents an (episode, role) pair, bucketed by
    # (task group, role): the docstring's example
    index, groups = torch.tensor([0, 0, 0, 1]), torch.tensor([3, 3, 3, 3])
    inverse, first, unit_groups = role_units(index, groups)
    assert inverse.tolist() == [0, 0, 0, 1] and first.tolist() == [0, 3]
    assert unit_groups.tolist() == [3, 3]
    inverse, first, unit_groups = role_units(index, groups, torch.tensor([0, 1, 0, 1]))
    assert inverse.tolist() == [0, 1, 0, 2] and first.tolist() == [0, 1, 3]
    assert unit_groups.tolist() == [6, 7, 7]

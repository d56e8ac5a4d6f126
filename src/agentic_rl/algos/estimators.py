"""The advantage estimators by name (``algo.name``): the one table the learner, the config
validation and the trainer's setup read.

Each entry holds the function the learner calls and the flags that say what the estimator
needs and allows. Every ``fn`` has the same signature, ``fn(AdvantageInputs) -> (advantages
[B, T], returns [B, T] or None)``, and is a short adapter over the documented math in
:mod:`agentic_rl.algos.advantages` / :mod:`agentic_rl.algos.gigpo` /
:mod:`agentic_rl.algos.turns` / :mod:`agentic_rl.algos.tree` (``returns`` are value
targets, for estimators with a critic). Adding an estimator: its function and hand-computed
test, an adapter and an entry here; nothing else branches on estimator names.

Shapes: ``B`` rows (training samples), ``T`` tokens, as in :mod:`agentic_rl.algos.advantages`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algos.advantages import (
    dr_grpo_advantages,
    episode_rows,
    gae_advantages,
    grpo_advantages,
    multi_conversation_advantages,
    outcome_to_token_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    trr_pp_advantages,
    whiten_advantages,
)
from agentic_rl.algos.gigpo import gigpo_advantages
from agentic_rl.algos.roles import role_group_advantages, role_units
from agentic_rl.algos.tree import (
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


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator may read; the fields an estimator needs are named in its flags."""

    rewards: Tensor
    """[B] the outcome reward of each row's episode."""
    mask: Tensor
    """[B, T] loss mask (non-zero on policy tokens)."""
    group_ids: Tensor
    """[B] long: rows of one group (the episodes of one task) share an id."""
    episode_index: Tensor | None = None
    """[B] long: rows of one episode share it (step mode, context-budget segments,
    multi-conversation samples); None = every row is its own episode."""
    token_rewards: Tensor | None = None
    """[B, T] step rewards on the last loss-mask-1 token of the turn that earned them (ppo)."""
    values: Tensor | None = None
    """[B, T] the critic's values before the update (ppo)."""
    kl: Tensor | None = None
    """[B, T] per-token KL to the reference, subtracted from the rewards (algo.kl_in_reward);
    only estimators with ``kl_reward`` read it."""
    kl_coef: float = 0.0
    gamma: float = 1.0
    lam: float = 1.0
    step_returns: Tensor | None = None
    """[B] discounted return from each step (gigpo)."""
    step_group_ids: Tensor | None = None
    """[B] long anchor-state step groups (gigpo)."""
    gigpo_omega: float = 1.0
    gigpo_norm: str = "mean_std_norm"
    task_type_ids: Tensor | None = None
    """[B] long task type of each row (trr_pp); None = one type."""
    role_ids: Tensor | None = None
    """[B] long role of each row (trr_pp); None = one role."""
    turn_ids: Tensor | None = None
    """[B, T] long: the model turn of each token, -1 off turns (turn-level estimators)."""
    turn_rewards: Tensor | None = None
    """[B, K] each turn's step reward, 0-padded (turn-level estimators)."""
    num_turns: Tensor | None = None
    """[B] long: the turns of each row (turn-level estimators)."""
    turn_coef: float = 1.0
    """Weight of the turn advantage (mt_grpo: algo.turn_advantage_coef)."""
    outcome_only: bool = False
    """mt_grpo: the outcome advantage normalises each episode's last-turn reward (its outcome
    apart from the intermediate turns' step rewards, algo.mt_grpo_outcome=last_turn), not the
    episode reward."""
    tree_ids: Tensor | None = None
    """[B] long: the leaves of one tree share an id, unique across groups (the tree_grpo
    estimators; rollout.tree); None = every row its own tree (config validation requires
    trees)."""
    attention: Tensor | None = None
    """[B, T] the rows' attention mask, 1 on real tokens (tree_grpo_per_token: a row's response
    runs from its first trained token to its last real token)."""
    agent_ids: Tensor | None = None
    """[B] long: the agent role of each row (multi-agent envs), given with algo.role_groups
    and to the turn-level estimators. The per-episode group estimators then compare each role's
    samples within (task group x role) (algos/roles.py; without it, MATPO's rule: one advantage
    per episode); the turn-level ones credit each role's turns as a unit of their own
    (`role_units`)."""


DEFAULT_LOSS_AGG = "seq-mean-token-mean"
"""algo.loss_agg of an estimator without one of its own when the config leaves it "" (GRPO's
mean over each sequence's tokens, then over sequences)."""

AdvantageFn = Callable[[AdvantageInputs], tuple[Tensor, Tensor | None]]


@dataclass(frozen=True)
class Estimator:
    """One advantage estimator: its adapter and what it needs from the trainer."""

    fn: AdvantageFn
    sequence_level: bool
    """One advantage per row (constant over its tokens): GSPO's sequence ratio needs this."""
    per_episode: bool = False
    """The advantage of an episode, computed once from its reward and group and copied to all
    its rows: usable with rollout.mode=step and rollout.context_budget."""
    step_wise: bool = False
    """Trains step samples with step returns and anchor-state groups (GiGPO): needs
    rollout.mode=step, an env with anchor states and the `gigpo` config section."""
    needs_groups: bool = False
    """Compares the samples of a group: rollout.group_size must be >= 2."""
    needs_value_head: bool = False
    """GAE with a critic: the trainer creates a value head and fills the old values."""
    kl_reward: bool = False
    """Takes the KL as a reward penalty, per token (ppo, reinforce_pp) or summed over each turn
    (turn_ppo): algo.kl_in_reward is allowed."""
    task_buckets: bool = False
    """Normalises within (task type x role) buckets read from algo.trr_type_field /
    algo.trr_role_field."""
    tree_groups: bool = False
    """Normalises within each tree of a tree rollout too (Tree-GRPO): needs rollout.tree."""
    discounted: bool = False
    """Discounts its token returns by algo.gamma (GAE, REINFORCE++): algo.gamma acts."""
    turn_level: bool = False
    """Credits each model turn of an episode on its own, from the turn structure
    (TrainBatch.turn_ids / turn_rewards / num_turns): needs rollout.mode=episode (one row per
    episode, every turn in it) or rows that cut an episode's turns (step mode, memory
    conversations, context segments), each carrying the episode's table (learner/batch.py
    episode_turn_tensors); in a multi-agent episode each role's turns are a unit of their own
    (`role_units`)."""
    turn_groups: bool = False
    """Normalises each turn index's step rewards over the group (MT-GRPO): algo.
    turn_advantage_coef acts; the turns before the last carry it, so episodes need more than
    one turn (rollout.max_turns >= 2)."""
    value_positions: Callable[[AdvantageInputs], Tensor] | None = None
    """Where the critic is trained ([B, T] bool; with needs_value_head): None = every trained
    token; turn_ppo: each turn's first trained token, where its turn value is read."""
    loss_agg: str = ""
    """The loss aggregation the method itself prescribes ("" = none: DEFAULT_LOSS_AGG unless
    the config chooses one). It wins over an aggregation the config inherited from a recipe
    or stage that chose another estimator; an explicit conflicting choice on the command line
    is refused (config/load.py `settle_loss_agg`)."""


def _per_episode(estimate: Callable[[Tensor, Tensor], Tensor], x: AdvantageInputs) -> Tensor:
    """``estimate(episode rewards [E], episode groups [E]) -> [E]`` on each episode's first row,
    copied to every row of the episode (MemAgent's multi-conversation advantage; in step mode,
    every step), then to each row's masked tokens. With `x.agent_ids` (algo.role_groups) the
    unit is an episode's role instead (`role_group_advantages`)."""
    index = _episode_index(x)
    if x.agent_ids is not None:  # algo.role_groups: (task group x role) buckets
        per_row = role_group_advantages(x.rewards, x.group_ids, x.agent_ids, index, estimate)
        return outcome_to_token_advantages(per_row, x.mask)
    inverse, first = episode_rows(index)
    episode_adv = estimate(x.rewards[first], x.group_ids[first])
    return outcome_to_token_advantages(multi_conversation_advantages(episode_adv, inverse), x.mask)


def _grpo(x: AdvantageInputs) -> tuple[Tensor, None]:
    return _per_episode(grpo_advantages, x), None


def _dr_grpo(x: AdvantageInputs) -> tuple[Tensor, None]:
    return _per_episode(dr_grpo_advantages, x), None


def _rloo(x: AdvantageInputs) -> tuple[Tensor, None]:
    return _per_episode(rloo_advantages, x), None


def _reinforce_pp(x: AdvantageInputs) -> tuple[Tensor, None]:
    kl_coef = x.kl_coef if x.kl is not None else 0.0
    return reinforce_pp_advantages(x.rewards, x.mask, x.kl, kl_coef, gamma=x.gamma), None


def _reinforce_pp_baseline(x: AdvantageInputs) -> tuple[Tensor, None]:
    return reinforce_pp_baseline_advantages(x.rewards, x.group_ids, x.mask), None


def _ppo(x: AdvantageInputs) -> tuple[Tensor, Tensor]:
    if x.values is None:
        raise ValueError("ppo needs old values: run the value head before compute_advantages")
    if x.token_rewards is None:
        raise ValueError("ppo needs the token rewards (TrainBatch.token_rewards)")
    rewards = x.token_rewards if x.kl is None else x.token_rewards - x.kl_coef * x.kl
    adv, returns = gae_advantages(rewards, x.values, x.mask, gamma=x.gamma, lam=x.lam)
    return whiten_advantages(adv, x.mask), returns


def _gigpo(x: AdvantageInputs) -> tuple[Tensor, None]:
    if x.step_returns is None or x.step_group_ids is None:
        raise ValueError("gigpo needs step returns and step groups: use collate_episodes")
    adv = gigpo_advantages(
        x.rewards,
        x.group_ids,
        x.step_returns,
        x.step_group_ids,
        omega=x.gigpo_omega,
        norm=x.gigpo_norm,
    )
    return outcome_to_token_advantages(adv, x.mask), None


def _trr_pp(x: AdvantageInputs) -> tuple[Tensor, None]:
    zeros = torch.zeros(x.rewards.shape[0], dtype=torch.long, device=x.rewards.device)
    types = x.task_type_ids if x.task_type_ids is not None else zeros
    roles = x.role_ids if x.role_ids is not None else zeros
    return trr_pp_advantages(x.rewards, types, roles, x.mask), None


def _trees(x: AdvantageInputs) -> Tensor:
    """[B] the tree of each row; without trees every row is its own (no intra-tree term)."""
    if x.tree_ids is not None:
        return x.tree_ids
    return torch.arange(x.rewards.shape[0], device=x.rewards.device)


def _tree_grpo(x: AdvantageInputs) -> tuple[Tensor, None]:
    adv = tree_grpo_advantages(x.rewards, x.group_ids, _trees(x))
    return outcome_to_token_advantages(adv, x.mask), None


def _tree_grpo_2norm(x: AdvantageInputs) -> tuple[Tensor, None]:
    adv = tree_2norm_advantages(x.rewards, x.group_ids, _trees(x))
    return outcome_to_token_advantages(adv, x.mask), None


def _tree_grpo_inner(x: AdvantageInputs) -> tuple[Tensor, None]:
    return outcome_to_token_advantages(tree_inner_advantages(x.rewards, _trees(x)), x.mask), None


def _tree_grpo_per_token(x: AdvantageInputs) -> tuple[Tensor, None]:
    """Both Tree-GRPO terms normalised over the pooled response tokens, trained on the loss
    mask's tokens only (observations count in the pools, as in the reference, but get none)."""
    if x.attention is None:
        raise ValueError("tree_grpo_per_token needs the rows' attention mask (TrainBatch)")
    response = response_span(x.mask, x.attention)
    adv = tree_per_token_advantages(x.rewards, response, x.group_ids, _trees(x))
    return adv * (x.mask != 0), None


def _turns(x: AdvantageInputs, name: str) -> tuple[Tensor, Tensor, Tensor]:
    """The batch's turn structure (TrainBatch.turn_ids, turn_rewards, num_turns)."""
    if x.turn_ids is None or x.turn_rewards is None or x.num_turns is None:
        raise ValueError(f"{name} needs the turns of each row: collate fills TrainBatch.turn_ids")
    return x.turn_ids, x.turn_rewards, x.num_turns


def _episode_index(x: AdvantageInputs) -> Tensor:
    """Each row's episode: `x.episode_index`, or every row its own episode without it."""
    n = x.rewards.shape[0]
    return x.episode_index if x.episode_index is not None else torch.arange(n)


def _units(x: AdvantageInputs) -> tuple[Tensor, Tensor, Tensor]:
    """Each row's turn unit, each unit's first row and its group (`role_units`): an episode,
    or in a multi-agent episode (`x.agent_ids`) one role's turns in it. Where a unit spans rows
    (step mode, memory conversations, context segments) each carries the unit's whole turn
    table (learner/batch.py `episode_turn_tensors`), so the turn estimators read it once, from
    the first row, and hand each row its turns' credit."""
    return role_units(_episode_index(x), x.group_ids, x.agent_ids)


def _mt_grpo(x: AdvantageInputs) -> tuple[Tensor, None]:
    """MT-GRPO: GRPO's outcome advantage on every token, plus turn_coef x the group-normalised
    step reward of its turn on the turns before the last (the last turn's reward is part of
    the outcome). The outcome is the episode reward, or with `outcome_only` the last turn's
    reward alone (`last_turn_rewards`). Computed over units (each episode, or each role of a
    multi-agent episode, once: `_units`)."""
    turn_ids, turn_rewards, num_turns = _turns(x, "mt_grpo")
    inverse, first, groups = _units(x)
    table, turns = turn_rewards[first], num_turns[first]
    earlier = turn_slots(turns - 1, table.shape[1])
    turn_adv = turn_group_advantages(table, earlier, groups)
    rewards = x.rewards[first]
    if x.outcome_only:
        rewards = last_turn_rewards(table, turns, rewards)
    outcome = grpo_advantages(rewards, groups)
    adv = mt_grpo_token_advantages(
        outcome[inverse],
        turn_adv[inverse],
        turn_ids,
        x.mask,
        turns[inverse] - 1,
        turn_coef=x.turn_coef,
    )
    return adv, None


def _turn_start_positions(x: AdvantageInputs) -> Tensor:
    turn_ids, _, _ = _turns(x, "turn_ppo")
    return turn_start_mask(turn_ids, x.mask)


def _turn_ppo(x: AdvantageInputs) -> tuple[Tensor, Tensor]:
    """Turn-PPO: a turn-level critic. V_k is the critic's value at turn k's first trained token
    (the state before the turn), GAE runs over the turns with algo.gamma / algo.lam, every
    token of turn k takes A_k (whitened over the trained tokens, as ppo's), and the critic's
    target R_k = A_k + V_k sits on that first token only (`value_positions`). With the KL in
    the reward, turn k's reward is r_k - kl_coef x the summed KL of its tokens. Over units
    (episodes, or each role's turns of a multi-agent episode): turn k's value and KL come from
    the row that holds turn k (`_units`)."""
    if x.values is None:
        raise ValueError("turn_ppo needs old values: run the value head before the advantages")
    turn_ids, turn_rewards, num_turns = _turns(x, "turn_ppo")
    width = turn_rewards.shape[1]
    inverse, first, _ = _units(x)
    table = turn_rewards[first]

    def per_episode(per_row: Tensor) -> Tensor:  # [N, K] -> [E, K]: each turn's row adds its own
        return per_row.new_zeros(table.shape).index_add(0, inverse, per_row)

    if x.kl is not None:  # algo.kl_in_reward: each turn pays the KL of its tokens
        table = table - x.kl_coef * per_episode(turn_sums(x.kl * x.mask, turn_ids, width))
    starts = turn_start_mask(turn_ids, x.mask)
    values = per_episode(turn_values(x.values, turn_ids, starts, width))
    adv, returns = turn_gae(
        table, values, turn_slots(num_turns[first], width), gamma=x.gamma, lam=x.lam
    )
    token_adv = turn_to_token_advantages(adv[inverse], turn_ids, x.mask)
    return whiten_advantages(token_adv, x.mask), turn_to_token_advantages(
        returns[inverse], turn_ids, starts
    )


# `algo.name`.
ADVANTAGE_ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(_grpo, sequence_level=True, per_episode=True, needs_groups=True),
    "dr_grpo": Estimator(
        _dr_grpo,
        sequence_level=True,
        per_episode=True,
        needs_groups=True,
        loss_agg="seq-mean-token-sum-norm",  # Dr. GRPO: sum over tokens / a constant length
    ),
    "rloo": Estimator(_rloo, sequence_level=True, per_episode=True, needs_groups=True),
    "reinforce_pp": Estimator(_reinforce_pp, sequence_level=False, kl_reward=True, discounted=True),
    "reinforce_pp_baseline": Estimator(
        _reinforce_pp_baseline, sequence_level=True, needs_groups=True
    ),
    "ppo": Estimator(
        _ppo, sequence_level=False, needs_value_head=True, kl_reward=True, discounted=True
    ),
    "gigpo": Estimator(_gigpo, sequence_level=True, step_wise=True, needs_groups=True),
    "trr_pp": Estimator(_trr_pp, sequence_level=True, task_buckets=True),
    "mt_grpo": Estimator(
        _mt_grpo, sequence_level=False, needs_groups=True, turn_level=True, turn_groups=True
    ),
    "turn_ppo": Estimator(
        _turn_ppo,
        sequence_level=False,
        needs_value_head=True,
        kl_reward=True,
        discounted=True,
        turn_level=True,
        value_positions=_turn_start_positions,
    ),
    # Tree-GRPO and the reference code's variants of it (algos/tree.py): A_inter + A_intra,
    # sequential normalisation, the intra-tree term alone, both terms over tokens.
    "tree_grpo": Estimator(_tree_grpo, sequence_level=True, needs_groups=True, tree_groups=True),
    "tree_grpo_2norm": Estimator(
        _tree_grpo_2norm, sequence_level=True, needs_groups=True, tree_groups=True
    ),
    "tree_grpo_inner": Estimator(
        _tree_grpo_inner, sequence_level=True, needs_groups=True, tree_groups=True
    ),
    "tree_grpo_per_token": Estimator(
        _tree_grpo_per_token, sequence_level=False, needs_groups=True, tree_groups=True
    ),
}

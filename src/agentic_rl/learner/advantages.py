"""Credit assignment: a `TrainBatch`'s rewards (and values) -> its per-token advantages.

The learner's middle stage, between collating trajectories (batch.py) and the policy update
(update.py): it maps a batch's fields onto the estimator inputs of `algos/estimators.py` (pure
functions with their formulas and hand-computed tests) and writes the result back.
"""

from __future__ import annotations

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs
from agentic_rl.algos.losses import kl_penalty
from agentic_rl.config.algo import AlgoConfig, GigpoConfig
from agentic_rl.learner.batch import TrainBatch


def compute_advantages(
    batch: TrainBatch, algo: AlgoConfig, gigpo: GigpoConfig | None = None
) -> None:
    """Fill batch.advantages (and batch.returns, the value targets, for estimators with a
    critic) with the estimator `algo.name` of `algos/estimators.py`; KL-in-reward applied here.

    Group estimators compare EPISODES: each episode's advantage is computed once and copied to
    all its rows (MemAgent's multi-conversation advantage; in step mode, every step of an
    episode). In episode mode each row is its own episode, so this is the plain estimator."""
    estimator = ADVANTAGE_ESTIMATORS.get(algo.name)
    if estimator is None:
        raise ValueError(f"unknown advantage estimator {algo.name!r}")
    mask = batch.loss_mask
    kl = None
    if algo.kl_in_reward and batch.ref_logprobs is not None:
        kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, algo.kl_estimator) * mask
    gigpo = gigpo or GigpoConfig()
    inputs = AdvantageInputs(
        rewards=batch.rewards,
        mask=mask,
        group_ids=batch.group_ids,
        episode_index=batch.episode_index,
        token_rewards=batch.token_rewards,
        values=batch.old_values,
        kl=kl,
        kl_coef=algo.kl_coef,
        gamma=algo.gamma,
        lam=algo.lam,
        step_returns=batch.step_returns,
        step_group_ids=batch.step_group_ids,
        gigpo_omega=gigpo.omega,
        gigpo_norm=gigpo.norm,
        task_type_ids=batch.task_type_ids,
        role_ids=batch.role_ids,
        tree_ids=batch.tree_ids,
        attention=batch.attention_mask,
        # per-role groups (algo.role_groups); the turn estimators credit each role's turns
        agent_ids=batch.agent_ids if algo.role_groups or estimator.turn_level else None,
        turn_ids=batch.turn_ids,
        turn_rewards=batch.turn_rewards,
        num_turns=batch.num_turns,
        turn_coef=algo.turn_advantage_coef,
        outcome_only=algo.mt_grpo_outcome == "last_turn",
    )
    advantages, returns = estimator.fn(inputs)
    if returns is not None and estimator.value_positions is not None:
        batch.value_mask = estimator.value_positions(inputs).to(mask.dtype)
    batch.advantages = advantages
    if returns is not None:
        batch.returns = returns

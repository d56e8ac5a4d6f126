"""Kept episodes -> the batch an update trains on: collate them, fill the reference logprobs,
the old values (ppo) and the advantages, apply the overlong filter and the stale-sample
correction (`prepare_batch`); and whether an update on that batch would move the weights at all
(`carries_gradient`). Called by `loop.train_step`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.algos.losses import overlong_filter_mask
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import (
    Episodes,
    TrainBatch,
    collate_episodes,
    micro_batch_bounds,
    row_tokens,
    unmask_observations,
)
from agentic_rl.learner.update import (
    forward_no_grad,
    recompute_old_logprobs,
    sampling_temperature,
)
from agentic_rl.model.critic import critic_values, reads_policy_states
from agentic_rl.model.load import autocast
from agentic_rl.model.lora import AdapterReference, adapter_disabled
from agentic_rl.scale.async_rollout import correct_stale
from agentic_rl.train import shaping as bf
from agentic_rl.train.setup import Setup


@contextlib.contextmanager
def reference_policy(setup: Setup) -> Iterator[nn.Module]:
    """The KL reference to run (train/setup.py `build` chose it): a frozen model; with LoRA the
    policy itself, with the frozen copy of its adapters swapped in (after a warm start) or
    with its adapters off."""
    if isinstance(setup.reference, AdapterReference):
        with setup.reference.computing_with(setup.policy) as policy:
            yield policy
    elif setup.reference is not None:
        yield setup.reference
    else:
        with adapter_disabled(setup.policy):
            yield setup.policy


def prepare_batch(setup: Setup, episodes: Episodes) -> TrainBatch:
    """Collate the kept episodes and fill reference logprobs, values and advantages."""
    cfg = setup.cfg
    estimator = ADVANTAGE_ESTIMATORS[cfg.algo.name]
    gigpo = cfg.gigpo if estimator.step_wise else None
    samples = episodes.samples
    if cfg.rollout.train_on_observations:  # ablation: observation tokens in the loss
        samples = [[unmask_observations(s) for s in ep] for ep in samples]
    # a turn-level estimator reads each episode's turns, however its rows cut them
    batch = collate_episodes(samples, setup.tokenizer.pad_token_id, gigpo, estimator.turn_level)
    if estimator.task_buckets:
        types, roles = bf.trr_ids(episodes.tasks, cfg.algo.trr_type_field, cfg.algo.trr_role_field)
        batch.task_type_ids, batch.role_ids = types[batch.episode_index], roles[batch.episode_index]
    chunk, micro = cfg.model.logprob_chunk_size, cfg.optim.micro_batch_size
    share, budget = cfg.model.share_prefix, cfg.optim.micro_batch_tokens
    # The same precision and temperature as the update, so the KL compares like with like.
    precision = cfg.learner.mixed_precision if setup.dp is None else "no"
    temp = sampling_temperature(cfg)
    with autocast(precision, next(setup.policy.parameters()).device):
        if cfg.algo.kl_coef > 0:
            with reference_policy(setup) as reference:
                batch.ref_logprobs, _ = forward_no_grad(
                    reference,
                    batch,
                    chunk,
                    micro,
                    dp=setup.dp,
                    share_prefix=share,
                    temperature=temp,
                    max_tokens=budget,
                )
        if setup.value_head is not None:
            batch.old_values = old_values(setup, batch, share)
    if cfg.algo.kl_in_reward and batch.ref_logprobs is not None and cfg.algo.recompute_old_logprobs:
        # The KL in the reward is taken against the learner's pi_old, recomputed first (veRL
        # computes old_log_prob before the KL penalty): the behaviour logprobs are of the
        # sampler's distribution (top-p renormalised, another engine or precision), and would
        # charge every token the mismatch. The update then reuses this pi_old. (Config refuses
        # KL in the reward where pi_old is the behaviour logprobs of another distribution.)
        recompute_old_logprobs(setup.policy, batch, cfg, setup.dp)
    if cfg.filters.overlong_filter:
        # DAPO: a cut-off episode's reward says nothing about its quality; drop it from the loss
        # before the advantages, so batch whitening (ppo, reinforce_pp) runs over the rows that
        # train. Group statistics read the rewards, not the mask: it still counts in its
        # group's mean and std, as in DAPO.
        truncated = torch.tensor([s.truncated for ep in episodes.samples for s in ep])
        batch.loss_mask = overlong_filter_mask(batch.loss_mask, truncated)
    compute_advantages(batch, cfg.algo, cfg.gigpo)
    if cfg.rollout.max_staleness > 0:  # samples may be from older weights: decoupled PPO
        correct_stale(setup, batch)
    return batch


def old_values(setup: Setup, batch: TrainBatch, share_prefix: bool) -> torch.Tensor:
    """The critic's values V_t = V(x_<t) [N, T] before the update (0 off the loss mask): from
    the policy's states for a shared value head, from the critic's own pass for a separate one
    (no policy pass then)."""
    critic, micro = setup.value_head, setup.cfg.optim.micro_batch_size
    chunk, budget = setup.cfg.model.logprob_chunk_size, setup.cfg.optim.micro_batch_tokens
    assert critic is not None
    if reads_policy_states(critic):
        share = share_prefix and setup.dp is None
        _, values = forward_no_grad(
            setup.policy, batch, chunk, micro, critic, setup.dp, share, max_tokens=budget
        )
    elif setup.dp is not None:  # each process its share of the rows; all get all
        _, values = setup.dp.forward_no_grad(_critic_pass, critic, batch, chunk, micro, critic)
    else:
        _, values = _critic_pass(critic, batch, chunk, micro, critic, share_prefix, budget)
    assert values is not None
    return values


@torch.no_grad()
def _critic_pass(
    model: nn.Module,
    batch: TrainBatch,
    chunk: int,
    micro: int,
    critic: nn.Module | None,
    share_prefix: bool = False,
    max_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A separate critic's values in micro-batches (at most `micro` rows and, if > 0,
    `max_tokens` tokens), with `forward_no_grad`'s signature and result (no logprobs: zeros),
    so fsdp's `DataParallel.forward_no_grad` can run it."""
    assert critic is not None
    values = []
    device = next(critic.parameters()).device  # trainer.device
    tokens = row_tokens(batch.input_ids, batch.attention_mask, share_prefix) if max_tokens else None
    for start, end in micro_batch_bounds(len(batch), micro, None, tokens, max_tokens):
        mb = batch.select(slice(start, end)).to(device)
        wanted = mb.loss_mask > 0
        v = critic_values(critic, mb.input_ids, mb.attention_mask, None, wanted, share_prefix)
        values.append(v * mb.loss_mask)
    out = torch.cat(values).to(batch.loss_mask.device)
    return torch.zeros_like(out), out


def carries_gradient(setup: Setup, batch: TrainBatch | None) -> bool:
    """False when an update on `batch` would only move Adam's moments: its advantages are all
    zero (every group all-correct or all-wrong) and there is no KL, entropy or value term."""
    if batch is None:
        return False
    assert batch.advantages is not None
    return not (
        bool((batch.advantages * batch.loss_mask == 0).all())
        and setup.cfg.algo.kl_coef == 0
        and setup.cfg.algo.entropy_coef == 0
        and setup.value_head is None
    )

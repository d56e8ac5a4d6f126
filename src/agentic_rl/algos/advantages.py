"""Advantage estimators for policy-gradient training of LLM agents.

Shapes: ``B`` sequences (``num_prompts * G`` flattened), ``T`` tokens. ``mask`` is ``[B, T]``
(bool or float, non-zero on policy-generated tokens). ``group_ids`` is a LongTensor ``[B]``;
samples of the same prompt share an id, ids need not be contiguous or sorted.

Advantages are constants of the policy gradient, so every function detaches its inputs and
returns tensors without autograd history. Values at mask-0 positions never reach an output.

Group-relative estimators give *exactly* 0 to a group whose rewards are all equal (spread
``<= 1e-6 * max(1, |mean|)``) and to singleton groups: otherwise float rounding in the mean
leaves ~1e-8 residues, which std-normalisation and Adam's per-parameter rescaling turn into
real updates from a group that carries no learning signal.

The trainer picks an estimator by name (``algo.name``) from the table in
:mod:`agentic_rl.algos.estimators`, which also says what each one needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algos.masked import ZERO_SPREAD_RTOL, as_bool_mask, masked_whiten


@dataclass(frozen=True)
class _GroupStats:
    rewards: Tensor  # [B], detached, floating
    inverse: Tensor  # [B] -> dense group index in [0, num_groups)
    counts: Tensor  # [num_groups]
    mean: Tensor  # [num_groups]
    degenerate: Tensor  # [num_groups] bool: singleton or constant rewards


def _group_stats(rewards: Tensor, group_ids: Tensor) -> _GroupStats:
    """Per-group size, mean and degeneracy via scatter ops (no sorting of ``group_ids``)."""
    # Integer or half-precision rewards are lifted to >= float32 so group means are accurate.
    r = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    n = uniq.numel()
    counts = r.new_zeros(n).index_add_(0, inverse, torch.ones_like(r))
    mean = r.new_zeros(n).index_add_(0, inverse, r) / counts.clamp_min(1)
    hi = r.new_full((n,), -torch.inf).scatter_reduce_(0, inverse, r, "amax")
    lo = r.new_full((n,), torch.inf).scatter_reduce_(0, inverse, r, "amin")
    constant = (hi - lo) <= ZERO_SPREAD_RTOL * mean.abs().clamp_min(1.0)
    return _GroupStats(r, inverse, counts, mean, (counts < 2) | constant)


def _zero_degenerate(adv: Tensor, stats: _GroupStats) -> Tensor:
    return torch.where(stats.degenerate[stats.inverse], 0, adv)


def grpo_advantages(
    rewards: Tensor, group_ids: Tensor, eps: float = 1e-6, scale_by_std: bool = True
) -> Tensor:
    """GRPO group-normalised outcome advantage (Shao et al. 2024, DeepSeekMath).

    ``A_i = (R_i - mean_g(R)) / (std_g(R) + eps)`` over the group ``g`` of sample ``i``.
    ``std`` is the unbiased (N - 1) sample std, matching ``torch.std`` as used by TRL.
    With ``scale_by_std=False`` this is ``R_i - mean_g(R)`` (Dr. GRPO).
    Degenerate (constant or singleton) groups get exactly 0.
    Shapes: ``rewards`` ``[B]``, ``group_ids`` ``[B]`` -> ``[B]``.
    """
    stats = _group_stats(rewards, group_ids)
    centered = stats.rewards - stats.mean[stats.inverse]
    if scale_by_std:
        sq = torch.zeros_like(stats.mean).index_add_(0, stats.inverse, centered**2)
        std = (sq / (stats.counts - 1).clamp_min(1)).sqrt()
        centered = centered / (std[stats.inverse] + eps)
    return _zero_degenerate(centered, stats)


def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Dr. GRPO advantage: ``A_i = R_i - mean_g(R)`` (no std division).

    Liu et al. 2025, "Understanding R1-Zero-like Training": dividing by the group std
    up-weights near-uniform groups (question-difficulty bias). Degenerate groups get 0.
    Shapes: ``[B]``, ``[B]`` -> ``[B]``.
    """
    return grpo_advantages(rewards, group_ids, scale_by_std=False)


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """REINFORCE leave-one-out advantage (Ahmadian et al. 2024, "Back to Basics").

    ``A_i = R_i - 1/(n-1) sum_{j != i} R_j = n/(n-1) * (R_i - mean_g(R))``; the baseline
    excludes the sample itself, so it is unbiased. Singleton / constant groups get 0.
    Shapes: ``[B]``, ``[B]`` -> ``[B]``.
    """
    stats = _group_stats(rewards, group_ids)
    n = stats.counts[stats.inverse]
    adv = (stats.rewards - stats.mean[stats.inverse]) * n / (n - 1).clamp_min(1)
    return _zero_degenerate(adv, stats)


def outcome_to_token_advantages(adv: Tensor, mask: Tensor) -> Tensor:
    """Broadcast a per-sequence advantage to every masked token.

    ``A_{b,t} = A_b * [m_{b,t} != 0]``. Shapes: ``adv`` ``[B]``, ``mask`` ``[B, T]`` -> ``[B, T]``.
    """
    m = as_bool_mask(mask)
    return torch.where(m, adv.detach()[:, None], 0)


def _last_masked_index(mask: Tensor) -> Tensor:
    """Index of the last non-zero entry per row, -1 for rows without one. ``[B, T]`` -> ``[B]``."""
    pos = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask, pos, -1).amax(dim=1)


def discounted_returns(token_rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Return-to-go over masked tokens only: ``G_t = r_t + gamma * G_{next(t)}``.

    ``next(t)`` is the next masked token of the row (0 after the last one), so mask-0 gaps
    (e.g. tool observations) are skipped: they neither add reward nor consume a discount step.
    Shapes: ``token_rewards`` ``[B, T]``, ``mask`` ``[B, T]`` -> ``[B, T]`` (0 where masked out).
    """
    m = as_bool_mask(mask)
    r = torch.where(m, token_rewards.detach(), 0)
    running = r.new_zeros(r.shape[0])
    out = [running] * r.shape[1]
    for t in reversed(range(r.shape[1])):
        # Mask-0 steps carry the running return through unchanged.
        running = torch.where(m[:, t], r[:, t] + gamma * running, running)
        out[t] = torch.where(m[:, t], running, 0)
    return torch.stack(out, dim=1) if out else r


def reinforce_pp_advantages(
    rewards: Tensor, mask: Tensor, kl: Tensor | None, kl_coef: float, gamma: float = 1.0
) -> Tensor:
    """REINFORCE++ token advantages (Hu 2025, "REINFORCE++").

    Token reward ``r_t = -kl_coef * kl_t`` on every masked token, plus the outcome reward ``R``
    on the last masked token; ``G_t = sum_{k >= t, masked} gamma^{k-t} r_k`` (see
    :func:`discounted_returns`); then ``A = whiten(G)`` with mean/std over all masked tokens of
    the batch. Rows without masked tokens drop their reward.
    Shapes: ``rewards`` ``[B]``, ``mask`` ``[B, T]``, ``kl`` ``[B, T]`` or None -> ``[B, T]``.
    """
    m = as_bool_mask(mask)
    r = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    token_r = torch.zeros(m.shape, dtype=r.dtype, device=r.device)
    if kl is not None:
        token_r = token_r - kl_coef * torch.where(m, kl.detach(), 0).to(r.dtype)
    last = _last_masked_index(m)
    has_token = last >= 0
    outcome = torch.where(has_token, r, 0)[:, None]
    token_r = token_r.scatter_add(1, last.clamp_min(0)[:, None], outcome)
    return masked_whiten(discounted_returns(token_r, m, gamma), m)


def reinforce_pp_baseline_advantages(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """REINFORCE++-baseline: group-mean baseline, then batch whitening (Hu 2025).

    ``A_{b,t} = whiten_batch(R_b - mean_g(R))`` over all masked tokens; constant groups
    contribute exactly 0 before whitening.
    Shapes: ``rewards`` ``[B]``, ``group_ids`` ``[B]``, ``mask`` ``[B, T]`` -> ``[B, T]``.
    """
    token_adv = outcome_to_token_advantages(dr_grpo_advantages(rewards, group_ids), mask)
    return masked_whiten(token_adv, mask)


def gae_advantages(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalised Advantage Estimation over masked tokens (Schulman et al. 2016).

    ``delta_t = r_t + gamma * V_{next(t)} - V_t``, ``A_t = delta_t + gamma * lam * A_{next(t)}``,
    where ``next(t)`` is the next *masked* token of the row and ``V``, ``A`` after the last
    masked token are 0. Mask-0 positions inside an episode (injected tool observations) are
    skipped: the recursion jumps over them, and their rewards/values are ignored.
    ``returns = A + V`` (the value target). Both outputs are 0 where masked out.
    Shapes: ``token_rewards``, ``values``, ``mask`` ``[B, T]`` -> ``([B, T], [B, T])``.
    """
    m = as_bool_mask(mask)
    r = torch.where(m, token_rewards.detach(), 0)
    v = torch.where(m, values.detach(), 0).to(r.dtype)
    next_value = r.new_zeros(r.shape[0])
    next_adv = r.new_zeros(r.shape[0])
    out = [next_adv] * r.shape[1]
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * next_value - v[:, t]
        adv_t = delta + gamma * lam * next_adv
        # Only masked steps advance the recursion; gaps pass the carried state through.
        next_adv = torch.where(m[:, t], adv_t, next_adv)
        next_value = torch.where(m[:, t], v[:, t], next_value)
        out[t] = torch.where(m[:, t], adv_t, 0)
    adv = torch.stack(out, dim=1) if out else r
    return adv, torch.where(m, adv + v, 0)


def whiten_advantages(adv: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Whiten token advantages over the batch's masked tokens (PPO practice, e.g. after GAE).

    ``(A - mean) / sqrt(var + eps)`` on masked tokens, 0 elsewhere; see :func:`masked_whiten`.
    Shapes: ``[B, T]``, ``[B, T]`` -> ``[B, T]``.
    """
    return masked_whiten(adv.detach(), mask, eps)


def episode_rows(episode_index: Tensor) -> tuple[Tensor, Tensor]:
    """The episodes of a batch whose episodes may span several rows (step mode, memory
    conversations, context segments): ``inverse`` ``[N]``, each row's episode numbered
    ``0..E-1`` in order of first appearance's index value, and ``first`` ``[E]``, each episode's
    first row. E.g. ``[4, 4, 7, 4]`` -> ``([0, 0, 1, 0], [0, 2])``.
    Shapes: ``episode_index`` ``[N]`` long -> ``([N], [E])``.
    """
    _, inverse = torch.unique(episode_index, return_inverse=True)
    n = episode_index.shape[0]
    rows = torch.arange(n, device=inverse.device)
    first = torch.full((int(inverse.max()) + 1,), n, dtype=torch.long, device=inverse.device)
    return inverse, first.scatter_reduce(0, inverse, rows, "amin")


def multi_conversation_advantages(
    sample_advantages: Tensor, conversation_sample_index: Tensor
) -> Tensor:
    """Multi-conversation advantage (Yu et al. 2025, "MemAgent", Multi-Conv DAPO/GRPO).

    A sample (one document read in chunks) produces several independent conversations; only
    the final one yields the reward. Each conversation ``c`` gets its sample's advantage:
    ``A_c = A_{s(c)}`` with ``s(c) = conversation_sample_index[c]``; the trainer then applies a
    token-level loss over all conversations. Raises IndexError on an out-of-range index.
    Shapes: ``sample_advantages`` ``[S]``, ``conversation_sample_index`` ``[C]`` long -> ``[C]``.
    """
    return sample_advantages.detach()[conversation_sample_index.long()]


def trr_pp_advantages(
    rewards: Tensor, task_types: Tensor, roles: Tensor, mask: Tensor, eps: float = 1e-8
) -> Tensor:
    """Task-Relative REINFORCE++ (Zhao et al. 2025, "Absolute Zero", Eq. 8).

    REINFORCE++ (outcome reward, gamma = 1, no KL reward) whitened separately within each
    (task type x role) bucket ``k`` (e.g. {deduction, abduction, induction} x {propose, solve}):
    every masked token of sequence ``b`` carries ``R_b`` and
    ``A_{b,t} = (R_b - mu_k) / sqrt(var_k + eps)``, where ``mu_k`` and ``var_k`` are the mean and
    the unbiased (N - 1) variance over the N masked TOKENS of the bucket's sequences.
    This is what the authors' code runs (Absolute-Zero-Reasoner ``azr_ray_trainer.py``: veRL's
    ``reinforce_plus_plus`` advantage, i.e. ``masked_whiten`` with ``masked_var(unbiased=True)``
    and ``rsqrt(var + 1e-8)``, once per (task type, role) batch); the paper writes Eq. 8 per
    sample without naming the std. So a sequence weighs by its token count; with equal lengths
    L this is the per-sample mean and a std with ``N L - 1`` degrees of freedom.
    Constant buckets (singletons included) get exactly 0; ids need not be contiguous.
    Shapes: ``rewards`` ``[B]``, ``task_types`` ``[B]`` long, ``roles`` ``[B]`` long, ``mask``
    ``[B, T]`` -> ``[B, T]``.
    """
    m = as_bool_mask(mask)
    r = rewards.detach().to(torch.promote_types(rewards.dtype, torch.float32))
    outcome = outcome_to_token_advantages(r, m)
    pairs = torch.stack([task_types.long(), roles.long()], dim=1)
    _, bucket = torch.unique(pairs, dim=0, return_inverse=True)
    out = torch.zeros_like(outcome)
    for k in range(int(bucket.max()) + 1 if bucket.numel() else 0):
        in_bucket = (bucket == k)[:, None] & m
        out = torch.where(in_bucket, masked_whiten(outcome, in_bucket, eps, unbiased=True), out)
    return out

"""Off-policy corrections: stale samples (asynchronous rollouts) and the rollout/training
mismatch (the generator's numbers differ from the learner's).

Three policies meet (AReaL, Fu et al. 2025, "AReaL: A Large-Scale Asynchronous Reinforcement
Learning System for Language Reasoning", arXiv 2505.24298, "decoupled PPO objective"):
  * ``pi_behav``: what actually sampled the token: older weights (stale samples), another
    engine or precision (vLLM in bf16, a bf16 HF generator against an fp32 learner), or the
    top-p-truncated distribution; its logprobs are the generator's behaviour logprobs;
  * ``pi_prox`` / ``pi_old``: the learner's weights before this update, its logprobs computed
    by the learner (the PPO ratio's denominator);
  * ``pi_theta``: the weights being optimised.
The rollout corrections (``ROLLOUT_CORRECTIONS``) turn ``pi_old / pi_behav`` into a per-token
weight on the policy-gradient loss: truncated IS (TIS), token-masked IS, IcePop's banded
weight and a sequence mask on the geometric-mean ratio. Shapes: ``N`` sequences, ``T`` tokens;
``mask`` ``[N, T]`` is non-zero on policy tokens.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from agentic_rl.algos.losses import kl_penalty, ppo_clip_loss
from agentic_rl.algos.masked import as_bool_mask

# Same bound as the PPO ratio: exp() of a corrupted log-ratio stays finite.
_MAX_LOG_RATIO = 20.0


def truncated_is_weights(
    prox_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Truncated importance weights of the behaviour policy, per token.

    ``w_t = min(pi_prox(x_t) / pi_behav(x_t), cap) = min(exp(prox_t - behav_t), cap)``.
    Truncation at ``cap`` (Ionides 2008, "Truncated Importance Sampling"; the rho-bar of
    IMPALA, Espeholt et al. 2018) bounds the variance a very stale token could add; AReaL's
    ``behav_imp_weight_cap`` plays the same role (it drops such tokens instead of clipping).
    Against the rollout/training mismatch this is TIS (Yao et al. 2025, "Your Efficient RL
    Framework Secretly Brings You Off-Policy RL Training", C = 2; veRL's ``rollout_is=token``).
    The weight is data, not a function of theta: it carries no gradient.
    Shapes: ``prox_logprobs``, ``behav_logprobs``, ``mask`` ``[N, T]`` -> ``[N, T]``, exactly 0
    at mask-0 positions. Raises ValueError for ``cap < 1``.
    """
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    m = as_bool_mask(mask)
    log_w = torch.where(m, prox_logprobs.detach() - behav_logprobs.detach(), 0)
    weights = torch.exp(log_w.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)).clamp(max=cap)
    return torch.where(m, weights, 0)


def decoupled_ppo_loss(
    logprobs: Tensor,
    prox_logprobs: Tensor,
    behav_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cap: float = 5.0,
    dual_clip: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Decoupled PPO surrogate with a truncated behaviour weight, per token.

    Hilton, Cobbe & Schulman 2022, "Batch size-invariance for policy optimization" (decoupled
    PPO), as used for stale samples by AReaL (Fu et al. 2025):

        u_t = pi_theta(x_t) / pi_prox(x_t)
        w_t = min(pi_prox(x_t) / pi_behav(x_t), cap)
        L_t = -w_t * min(u_t A_t, clip(u_t, 1 - clip_low, 1 + clip_high) A_t)

    The trust region is centred on the proximal policy (the learner's current weights), not on
    the stale behaviour policy, and the off-policy gap is corrected by ``w_t``. When the
    behaviour policy is the proximal one (fresh samples), ``w_t = 1`` and this is the PPO
    clipped loss. ``dual_clip`` as in :func:`ppo_clip_loss`.
    Returns ``(per_token_loss, clipped)``; the loss is 0 at mask-0 positions.
    Shapes: all inputs ``[N, T]`` -> ``([N, T], [N, T] bool)``.
    """
    loss, clipped = ppo_clip_loss(
        logprobs, prox_logprobs, advantages, mask, clip_low, clip_high, dual_clip
    )
    return loss * truncated_is_weights(prox_logprobs, behav_logprobs, mask, cap), clipped


def masked_is_token_weights(
    old_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Token-level masked importance sampling: keep a token only while its ratio is in band.

    ``r_t = pi_old(x_t) / pi_behav(x_t)``, ``w_t = 1 if 1/cap <= r_t <= cap else 0``.
    veRL's ``rollout_rs=token`` (rejection sampling): a token the two engines disagree on by
    more than the band contributes no gradient, instead of a truncated one (TIS); tokens in the
    band are not reweighted (IcePop, :func:`icepop_weights`, weighs them by ``r_t``). The loss
    normalisers are unchanged (the token is dropped from the sum, not from the count). Data,
    not a function of theta: no gradient.
    Shapes: ``[N, T]`` x 3 -> ``[N, T]`` of 0/1, exactly 0 at mask-0 positions.
    Raises ValueError for ``cap < 1``.
    """
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    m = as_bool_mask(mask)
    log_r = torch.where(m, old_logprobs.detach() - behav_logprobs.detach(), 0)
    bound = math.log(cap)
    keep = (log_r >= -bound) & (log_r <= bound) & m
    return keep.to(torch.promote_types(old_logprobs.dtype, torch.float32))


def icepop_weights(
    old_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor, cap: float, low: float = 0.5
) -> Tensor:
    """IcePop: importance weights inside a band, 0 outside (Ling Team 2025, "Every Step
    Evolves: Scaling Reinforcement Learning for Trillion-Scale Thinking Model", Ring-1T, arXiv
    2510.18855).

    ``k_t = pi_old(x_t) / pi_behav(x_t)`` (training engine over inference engine, same
    weights), ``w_t = k_t if low <= k_t <= cap else 0``. A token whose probability the two
    engines disagree on beyond the band is dropped (no gradient) instead of truncated (TIS)
    or kept at weight 1 (token-masked IS, :func:`masked_is_token_weights`). Defaults
    ``[0.5, 5]`` as veRL's ``rollout_is_threshold="0.5_5.0"``; zeroed tokens still count in
    the loss normaliser, as in veRL. Data, not a function of theta: no gradient; the
    log-ratio is clamped to +-20 before exp.
    Shapes: ``[N, T]`` x 3 -> ``[N, T]``, exactly 0 at mask-0 positions.
    Raises ValueError unless ``0 < low <= 1 <= cap``.
    """
    if not 0 < low <= 1 <= cap:
        raise ValueError(f"need 0 < low <= 1 <= cap, got low={low}, cap={cap}")
    m = as_bool_mask(mask)
    log_k = torch.where(m, old_logprobs.detach() - behav_logprobs.detach(), 0)
    k = torch.exp(log_k.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    keep = (log_k >= math.log(low)) & (log_k <= math.log(cap)) & m
    return torch.where(keep, k, 0)


def geometric_sequence_mask_weights(
    old_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Sequence-level mask on the geometric-mean ratio.

    ``g_i = (prod_t r_t)^(1/|y_i|) = exp(mean_{t masked} (log pi_old - log pi_behav))``;
    every token of sequence i gets ``w = 1 if 1/cap <= g_i <= cap else 0``. The geometric mean
    does not grow with the length as the product ratio does (GSPO's sequence ratio, Zheng et al.
    2025), so one band fits short and long answers; veRL's ``rollout_rs=geometric`` (runs use
    bands like [0.99, 1.01]). Sequences without masked tokens get 0 everywhere. No gradient.
    Shapes: ``[N, T]`` x 3 -> ``[N, T]`` of 0/1, exactly 0 at mask-0 positions.
    Raises ValueError for ``cap < 1``.
    """
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    m = as_bool_mask(mask)
    log_r = torch.where(m, old_logprobs.detach() - behav_logprobs.detach(), 0)
    n = m.sum(-1)
    log_g = log_r.sum(-1) / n.clamp(min=1).to(log_r.dtype)  # [N]
    bound = math.log(cap)
    keep = (log_g >= -bound) & (log_g <= bound) & (n > 0)
    return (keep[:, None] & m).to(torch.promote_types(old_logprobs.dtype, torch.float32))


CorrectionFn = Callable[[Tensor, Tensor, Tensor, float], Tensor]
ROLLOUT_CORRECTIONS: dict[str, CorrectionFn] = {
    "tis": truncated_is_weights,
    "mis_token": masked_is_token_weights,
    "mis_seq_geo": geometric_sequence_mask_weights,
    "icepop": icepop_weights,
}
"""`algo.rollout_correction` -> ``fn(old_logprobs, behav_logprobs, mask, cap)`` giving the
per-token weight ``[N, T]`` that multiplies the policy-gradient loss ("none": no weight).
The band's lower bound of those with ``BANDED_CORRECTIONS`` is a fifth argument, ``low``."""

BANDED_CORRECTIONS = ("icepop",)
"""Corrections with an explicit lower bound (``algo.rollout_correction_low``); the others'
band is ``[1/cap, cap]`` or they only truncate from above."""


def rollout_mismatch(
    old_logprobs: Tensor, behav_logprobs: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Per-token rollout/training mismatch on sampled tokens.

    With ``d_t = log pi_old(x_t) - log pi_behav(x_t)`` (learner minus generator), returns
    ``(k3_t, |d_t|)`` where ``k3_t = exp(d_t) - 1 - d_t`` is Schulman's k3 estimator of
    ``KL(pi_behav || pi_old)`` from samples of ``pi_behav`` (>= 0, unbiased; the tokens were
    drawn by the generator), computed by :func:`~agentic_rl.algos.losses.kl_penalty`
    (``kl_penalty(behav, old, "k3")``, so the same clamps apply). Callers report the mean of
    ``k3`` and the max of ``|d|`` over masked tokens. 0 at mask-0 positions.
    In float64: a healthy run's k3 sits near ``d^2 / 2 ~ 1e-8`` and below, where float32's
    ``exp(d) - 1 - d`` is rounding noise (it cannot resolve values below ~1e-7); the inputs'
    float32 values convert exactly, so ``d`` is their exact difference.
    Shapes: ``[N, T]`` x 3 -> ``([N, T], [N, T])``, float64.
    """
    m = as_bool_mask(mask)
    old, behav = old_logprobs.detach().double(), behav_logprobs.detach().double()
    k3 = kl_penalty(behav, old, "k3", mask=m)
    diff = torch.where(m, old - behav, 0)
    return k3, diff.abs()

"""Off-policy correction for stale samples (asynchronous rollouts).

Three policies meet when rollouts run ahead of the learner (AReaL, Fu et al. 2025, "AReaL: A
Large-Scale Asynchronous Reinforcement Learning System for Language Reasoning", arXiv
2505.24298, "decoupled PPO objective"):
  * ``pi_behav``: the (possibly older) weights that sampled the token; its logprobs are the
    generator's behaviour logprobs;
  * ``pi_prox``: the proximal policy, the learner's weights before this update;
  * ``pi_theta``: the weights being optimised.
Shapes: ``N`` sequences, ``T`` tokens; ``mask`` ``[N, T]`` is non-zero on policy tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algos.losses import ppo_clip_loss
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

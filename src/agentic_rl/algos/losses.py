"""Per-token policy/value losses, KL penalties and loss aggregation.

Shapes: ``B`` sequences, ``T`` tokens; ``mask`` ``[B, T]`` is non-zero on policy tokens.
Per-token functions return ``[B, T]`` tensors that are exactly 0 (with exactly 0 gradient)
at mask-0 positions; :func:`aggregate_loss` then reduces them to a scalar. Entropy bonuses
(and KL terms) are aggregated with the same :func:`aggregate_loss` mode as the policy loss,
so all terms share one normalisation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from agentic_rl.algos.masked import as_bool_mask, masked_sum

# exp(20) ~ 4.9e8: large enough to never bind in sane training, small enough that exp() of a
# corrupted log-ratio stays finite in fp32 instead of producing inf/NaN gradients.
_MAX_LOG_RATIO = 20.0
_K3_CLAMP = 10.0


def kl_penalty(
    logprobs: Tensor, ref_logprobs: Tensor, estimator: str, mask: Tensor | None = None
) -> Tensor:
    """Per-token estimate of ``KL(pi || pi_ref)`` from samples of ``pi``.

    J. Schulman, "Approximating KL Divergence" (2020), with ``x = logprobs - ref_logprobs``:
      * ``k1 = x``                       (unbiased, high variance, can be negative)
      * ``k2 = 0.5 * x^2``               (biased, low variance)
      * ``k3 = exp(-x) - 1 + x``         (unbiased, >= 0; "low_var_kl" in verl), clamped to
        ``[-10, 10]`` and computed with ``x`` clamped to ``[-20, 20]`` so exp cannot overflow.
    If ``mask`` is given, masked-out positions are 0 and get exactly zero gradient even when
    their inputs are inf/NaN; otherwise the caller must mask (e.g. via :func:`aggregate_loss`).
    Shapes: ``logprobs``, ``ref_logprobs`` ``[B, T]`` -> ``[B, T]``.
    Raises ValueError for an unknown estimator.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"unknown KL estimator {estimator!r}; expected one of {', '.join(KL_ESTIMATORS)}"
        )
    log_ratio = logprobs - ref_logprobs
    if mask is not None:
        log_ratio = torch.where(as_bool_mask(mask), log_ratio, 0)
    kl = KL_ESTIMATORS[estimator](log_ratio)
    return kl if mask is None else torch.where(as_bool_mask(mask), kl, 0)


def _kl_k1(x: Tensor) -> Tensor:
    return x


def _kl_k2(x: Tensor) -> Tensor:
    return 0.5 * x**2


def _kl_k3(x: Tensor) -> Tensor:
    x = x.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return (torch.exp(-x) - 1 + x).clamp(-_K3_CLAMP, _K3_CLAMP)


# `algo.kl_estimator`: per-token estimate of KL(pi || pi_ref) from x = logp - ref_logp (see
# kl_penalty for the formulas).
KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _kl_k1, "k2": _kl_k2, "k3": _kl_k3}


def clipped_surrogate(
    ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic clipped surrogate (Schulman et al. 2017, eq. 7), negated as a loss:
    max(-rho A, -clip(rho, 1 - clip_low, 1 + clip_high) A), elementwise over any shape, and
    where the clipped branch was taken (a bool tensor of the same shape). Chosen with `where`,
    not `maximum`, so that on a tie the gradient is the plain -A grad(rho), not half of each."""
    unclipped = -ratio * advantages
    clipped_loss = -ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    clipped = clipped_loss > unclipped
    return torch.where(clipped, clipped_loss, unclipped), clipped


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO clipped surrogate, per token (Schulman et al. 2017).

    ``rho = exp(logprobs - old_logprobs)``,
    ``L = -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A)``.
    Asymmetric bounds give DAPO's "clip-higher" (Yu et al. 2025, e.g. ``clip_high=0.28``).
    ``dual_clip=c`` (Ye et al. 2020, "Mastering Complex Control in MOBA Games", c = 3): for
    ``A < 0``, ``L = min(L, -c * A)`` (``None`` or 0: off); caps the loss of tokens whose
    ratio exploded, where the standard clip does not bind (``rho * A`` is the min) and the loss
    grows without bound.
    Returns ``(per_token_loss, clipped)``: the loss (0 at mask-0 positions) and a bool mask of
    masked tokens where a clipped term is the active one (strictly; ties count as unclipped),
    for the clip-fraction metric. Clipped tokens have zero gradient.
    Shapes: all inputs ``[B, T]`` -> ``([B, T], [B, T] bool)``.
    """
    if dual_clip is not None and dual_clip != 0 and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    m = as_bool_mask(mask)
    # Select before exp: garbage log-probs at mask-0 positions must not reach exp/grad.
    log_ratio = torch.where(m, logprobs - old_logprobs, 0)
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    adv = torch.where(m, advantages, 0)
    loss, clipped = clipped_surrogate(ratio, adv, clip_low, clip_high)
    if dual_clip:
        cap = -dual_clip * adv
        capped = (adv < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)
        clipped = clipped | capped
    return torch.where(m, loss, 0), clipped & m


def turn_ratio_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    turn_ids: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[Tensor, Tensor]:
    """PPO clipped surrogate with one ratio per turn: turn-level importance sampling (ST-PPO,
    Li et al. 2025, arXiv 2511.20718, eq. 4; the turn-level clipping of Turn-PPO, Li et al.
    2025, arXiv 2512.17008).

    A turn's ratio is the geometric mean of its tokens' ratios,
    ``s_k = exp(mean_{t in turn k, masked} (logp_t - old_logp_t))``, and every trained token
    ``t`` of turn ``k`` gets ``L_t = -min(s_k A_t, clip(s_k, 1 - clip_low, 1 + clip_high) A_t)``:
    the turn is the action of a turn-level MDP, so it is kept or clipped as a whole (a turn
    clips once its tokens have moved together, not token by token). GSPO's ratio
    (:func:`gspo_loss`) is this with one turn per sequence; unlike GSPO the loss stays per
    token, so the advantage may vary along the turn and any ``algo.loss_agg`` applies. The
    gradient of ``s_k`` reaches every trained token of the turn through the mean. The clip
    range is PPO's (0.2, which ST-PPO uses), not GSPO's 3e-4: a turn is a few dozen tokens, its
    mean log-ratio moves about as much as one token's. A trained token outside every turn
    (``turn_ids`` -1: observation tokens trained with rollout.train_on_observations) keeps its
    own token ratio.
    Returns ``(per_token_loss, clipped)`` as :func:`ppo_clip_loss` does (``clipped`` marks the
    tokens of clipped turns).
    Shapes: ``logprobs``, ``old_logprobs``, ``advantages``, ``mask`` ``[B, T]``, ``turn_ids``
    ``[B, T]`` long (the turn of each token, -1 off turns) -> ``([B, T], [B, T] bool)``.
    """
    m = as_bool_mask(mask)
    log_ratio = torch.where(m, logprobs - old_logprobs, 0)
    in_turn = m & (turn_ids >= 0)
    slot = turn_ids.clamp_min(0)
    width = int(slot.max().item()) + 1 if slot.numel() else 1
    shape = (log_ratio.shape[0], width)
    zeros = torch.zeros(shape, dtype=log_ratio.dtype, device=log_ratio.device)
    sums = zeros.scatter_add(1, slot, torch.where(in_turn, log_ratio, 0))
    counts = zeros.scatter_add(1, slot, in_turn.to(sums))
    turn_log_ratio = torch.gather(sums / counts.clamp_min(1), 1, slot)
    unit_log_ratio = torch.where(in_turn, turn_log_ratio, log_ratio)
    ratio = torch.exp(unit_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    adv = torch.where(m, advantages, 0)
    loss, clipped = clipped_surrogate(ratio, adv, clip_low, clip_high)
    return torch.where(m, loss, 0), clipped & m


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float | None = 0.2,
) -> Tensor:
    """Clipped value loss (PPO, as in OpenAI baselines / TRL).

    ``v_clip = old + clip(v - old, -clip, clip)``,
    ``L = 0.5 * max((v - R)^2, (v_clip - R)^2)``; ``clip=None`` gives ``0.5 * (v - R)^2``.
    The max makes the critic unable to profit from moving further than ``clip`` from its old
    prediction in one update. 0 at mask-0 positions.
    Shapes: all inputs ``[B, T]`` -> ``[B, T]``.
    """
    m = as_bool_mask(mask)
    v = torch.where(m, values, 0)
    old = torch.where(m, old_values, 0)
    ret = torch.where(m, returns, 0)
    loss = (v - ret) ** 2
    if clip is not None:
        v_clipped = old + (v - old).clamp(-clip, clip)
        loss = torch.maximum(loss, (v_clipped - ret) ** 2)
    return torch.where(m, 0.5 * loss, 0)


def aggregate_loss(
    per_token: Tensor,
    mask: Tensor,
    mode: str,
    *,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
    max_tokens: int | None = None,
) -> Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar.

    Modes (``l`` = loss, ``m`` = mask, ``N`` = ``num_sequences``):
      * ``"token-mean"``: ``sum_{b,t} l m / num_tokens`` (DAPO, Yu et al. 2025: every token
        weighs the same, long answers are not down-weighted).
      * ``"seq-mean-token-mean"``: ``sum_b (sum_t l m / sum_t m) / N`` (original GRPO).
      * ``"seq-mean-token-sum-norm"``: ``sum_{b,t} l m / (max_tokens * N)`` (Dr. GRPO, Liu et
        al. 2025: a constant normaliser removes the length bias); ``max_tokens`` is required.
    ``num_sequences`` / ``num_tokens`` default to this call's ``B`` / ``sum(m)``. Pass the
    GLOBAL counts of the whole batch when summing micro-batch losses: the sum then equals the
    full-batch loss exactly (gradient-accumulation invariance). Sequences without masked tokens
    contribute 0; an all-masked-out input gives 0, not NaN.
    Use the same mode for entropy bonuses so every term shares the normalisation.
    Shapes: ``per_token``, ``mask`` ``[B, T]`` -> scalar.
    Raises ValueError on an unknown mode or a missing/non-positive ``max_tokens``.
    """
    if mode not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"unknown loss aggregation {mode!r}; expected one of {', '.join(LOSS_AGGREGATIONS)}"
        )
    n_seq = per_token.shape[0] if num_sequences is None else num_sequences
    return LOSS_AGGREGATIONS[mode](per_token, as_bool_mask(mask), n_seq, num_tokens, max_tokens)


def _token_mean(
    per_token: Tensor, m: Tensor, n_seq: int, num_tokens: float | None, max_tokens: int | None
) -> Tensor:
    total = masked_sum(per_token, m)
    if num_tokens is not None:
        # A zero count implies a zero sum; dividing by 1 then returns 0 instead of NaN.
        return total / (num_tokens if num_tokens > 0 else 1.0)
    return total / m.sum().to(per_token.dtype).clamp_min(1)


def _seq_mean_token_mean(
    per_token: Tensor, m: Tensor, n_seq: int, num_tokens: float | None, max_tokens: int | None
) -> Tensor:
    seq_len = m.sum(dim=-1).to(per_token.dtype).clamp_min(1)
    return (masked_sum(per_token, m, dim=-1) / seq_len).sum() / max(n_seq, 1)


def _seq_mean_token_sum_norm(
    per_token: Tensor, m: Tensor, n_seq: int, num_tokens: float | None, max_tokens: int | None
) -> Tensor:
    if max_tokens is None or max_tokens <= 0:
        raise ValueError(
            f"mode 'seq-mean-token-sum-norm' needs a positive max_tokens, got {max_tokens}"
        )
    return masked_sum(per_token, m) / (max_tokens * max(n_seq, 1))


# `algo.loss_agg`: how a per-token loss becomes a scalar (see aggregate_loss for the formulas).
# Arguments: (per_token [B, T], bool mask [B, T], num_sequences, num_tokens, max_tokens).
LOSS_AGGREGATIONS: dict[str, Callable[[Tensor, Tensor, int, float | None, int | None], Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
) -> tuple[Tensor, Tensor]:
    """GSPO clipped surrogate with a sequence-level ratio (Zheng et al. 2025, "Group Sequence
    Policy Optimization").

    ``s_i = (pi(y_i) / pi_old(y_i))^(1/|y_i|) = exp(mean_{t masked} (logp_t - old_logp_t))``,
    ``L_i = -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i)``; the paper's clip
    range is (3e-4, 4e-4). The gradient of ``s_i`` reaches every masked token of the sequence
    (through the mean), and 0 reaches mask-0 positions even when their log-probs are inf/NaN.
    GSPO is sequence-level only: the trainer must average ``L_i`` over sequences (token-level
    aggregation of a sequence ratio is not meaningful). Sequences with no masked token get
    ``L_i = 0`` and are never clipped. Clipped sequences have zero gradient.
    Returns ``(per_sequence_loss, clipped)``; ``clipped`` is True where the clipped term is the
    active one (strictly; ties count as unclipped), for the clip-fraction metric.
    Shapes: ``logprobs``, ``old_logprobs``, ``mask`` ``[B, T]``, ``advantages`` ``[B]`` ->
    ``([B], [B] bool)``.
    """
    m = as_bool_mask(mask)
    log_ratio = torch.where(m, logprobs - old_logprobs, 0)
    n_tokens = m.sum(dim=-1)
    has_token = n_tokens > 0
    seq_log_ratio = log_ratio.sum(dim=-1) / n_tokens.clamp_min(1).to(log_ratio.dtype)
    ratio = torch.exp(seq_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    adv = torch.where(has_token, advantages, 0)
    loss, clipped = clipped_surrogate(ratio, adv, clip_low, clip_high)
    return torch.where(has_token, loss, 0), clipped & has_token


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.2,
) -> tuple[Tensor, Tensor]:
    """CISPO: clip the importance-sampling weight, not the update (MiniMax 2025, "MiniMax-M1:
    Scaling Test-Time Compute Efficiently with Lightning Attention", arXiv 2506.13585).

    ``r = exp(logprobs - old_logprobs)``, ``w = sg(clip(r, 1 - clip_low, 1 + clip_high))``,
    ``L = -w * A * logprobs``. The weight is a constant (stop-gradient), so every token keeps
    the gradient ``-w * A * grad log pi``, clipped ones included (PPO's clip zeroes theirs).
    The paper leaves the lower bound open (``clip_low >= 1``: ``1 - clip_low <= 0 < r``) and
    tunes only the upper one; veRL's example uses ``clip_high = 0.2`` (cap 1.2). The loss value
    itself is not meaningful (it contains ``log pi``), only its gradient. Use with token-level
    aggregation (``algo.loss_agg=token-mean``), as the paper normalises by all tokens.
    Returns ``(per_token_loss, clipped)``: 0 at mask-0 positions; ``clipped`` marks masked
    tokens whose weight was clipped (``w != r``), for the clip-fraction metric.
    Shapes: all inputs ``[B, T]`` -> ``([B, T], [B, T] bool)``.
    """
    m = as_bool_mask(mask)
    log_ratio = torch.where(m, logprobs.detach() - old_logprobs, 0)
    ratio = torch.exp(log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = -weight * torch.where(m, advantages, 0) * torch.where(m, logprobs, 0)
    return torch.where(m, loss, 0), (weight != ratio) & m


def _token_covariance(logprobs: Tensor, advantages: Tensor, m: Tensor) -> Tensor:
    """``Cov_t = (logp_t - mean_j logp_j) * (A_t - mean_j A_j)``, means over the masked tokens,
    no gradient; ``-inf`` off the mask so no selection can pick those positions. ``[B, T]``."""
    lp, adv = logprobs.detach(), advantages.detach()
    lp_mean = masked_sum(lp, m) / m.sum().clamp_min(1)
    adv_mean = masked_sum(adv, m) / m.sum().clamp_min(1)
    cov = (torch.where(m, lp, 0) - lp_mean) * (torch.where(m, adv, 0) - adv_mean)
    return torch.where(m, cov, -torch.inf)


def clip_cov_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    cov_ratio: float = 2e-4,
    cov_low: float = 1.0,
    cov_high: float = 5.0,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Clip-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for
    Reasoning Language Models", arXiv 2505.22617): detach a few high-covariance tokens.

    The entropy change of a softmax policy follows ``-Cov(log pi(y), A)``, so the tokens with a
    large logprob-advantage covariance drive entropy collapse. With ``N`` the masked tokens and
    ``Cov_t = (logp_t - mean logp) * (A_t - mean A)`` (means over the ``N`` tokens): among the
    masked tokens with ``cov_low < Cov_t < cov_high`` whose PPO clip does not already bind,
    pick ``max(1, floor(cov_ratio * N))`` uniformly at random (``generator``) and give them
    loss 0 (no gradient); every other token keeps the PPO clipped loss
    (:func:`ppo_clip_loss` without dual clip). Defaults: veRL's and the paper's (2e-4, 1, 5).
    The selection is over the tokens of this call (veRL: one micro-batch of one process).
    Returns ``(per_token_loss, detached)``: 0 at mask-0 positions; ``detached`` marks the
    selected tokens (veRL's ``pg_clipfrac`` for this loss).
    Shapes: all inputs ``[B, T]`` -> ``([B, T], [B, T] bool)``.
    """
    m = as_bool_mask(mask)
    loss, ppo_clipped = ppo_clip_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
    cov = _token_covariance(logprobs, advantages, m)
    eligible = (cov > cov_low) & (cov < cov_high) & m & ~ppo_clipped
    candidates = eligible.flatten().nonzero().squeeze(-1)
    count = max(int(cov_ratio * int(m.sum())), 1)
    perm = torch.randperm(len(candidates), generator=generator, device=candidates.device)
    detached = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    detached[candidates[perm[:count]]] = True
    detached = detached.view_as(m)
    return torch.where(detached, 0, loss), detached


def kl_cov_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cov_ratio: float = 2e-4,
    kl_coef: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """KL-Cov (Cui et al. 2025, arXiv 2505.22617): a KL penalty on the top-covariance tokens.

    ``r_t = exp(logp_t - old_logp_t)``; the ``k = max(1, floor(cov_ratio * N))`` masked tokens
    with the largest ``Cov_t`` (as in :func:`clip_cov_loss`) get
    ``L_t = -A_t r_t + kl_coef * |log r_t|``, all others ``L_t = -A_t r_t``: there is no ratio
    clip at all. veRL's defaults: ``cov_ratio = 2e-4``, coefficient 1 (the paper's ``k`` is a
    percent: 0.2 = 2e-3 for 7B). On the first step of an update ``r = 1`` and ``|log r|`` has
    zero gradient, so the penalty only acts on later mini-batches or epochs.
    Returns ``(per_token_loss, penalised)``: 0 at mask-0 positions; ``penalised`` marks the
    top-k tokens. Shapes: all inputs ``[B, T]`` -> ``([B, T], [B, T] bool)``.
    """
    m = as_bool_mask(mask)
    log_ratio = torch.where(m, logprobs - old_logprobs, 0).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    loss = -torch.exp(log_ratio) * torch.where(m, advantages, 0)
    n = int(m.sum())
    penalised = torch.zeros(m.numel(), dtype=torch.bool, device=m.device)
    if n > 0:
        k = max(int(cov_ratio * n), 1)
        top = torch.topk(_token_covariance(logprobs, advantages, m).flatten(), k).indices
        penalised[top] = True
    penalised = penalised.view_as(m) & m
    loss = torch.where(penalised, loss + kl_coef * log_ratio.abs(), loss)
    return torch.where(m, loss, 0), penalised


def gmpo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.4,
    clip_high: float = 0.4,
) -> tuple[Tensor, Tensor]:
    """GMPO: the geometric mean of the token ratios, clipped per token in log space (Zhao et al.
    2025, "Geometric-Mean Policy Optimization", arXiv 2507.20673).

    With ``d_t = logp_t - old_logp_t`` and ``s = sign(A_i)``, each token's log-ratio is clipped
    one-sidedly as PPO does, ``d'_t = s * min(s * d_t, s * clip(d_t, -clip_low, clip_high))``,
    then ``rho_i = exp(mean_{t masked} d'_t) = (prod_t r'_t)^(1/|y_i|)`` and
    ``L_i = -A_i * rho_i``. The geometric mean is less moved by a few outlier ratios than
    GRPO's arithmetic mean, which allows the wider range; the paper's is ``(e^-0.4, e^0.4)``:
    ``clip_low = clip_high = 0.4`` are LOG-space bounds (veRL's ``geo_mean`` reuses its PPO
    clip keys for them). Sequence-level like :func:`gspo_loss`: one advantage per sequence
    ``[B]``, the trainer averages ``L_i`` over sequences; sequences without masked tokens get 0.
    Clipped tokens get no gradient; the others get ``-A_i rho_i / |y_i|`` on their logprob.
    Returns ``(per_sequence_loss, clipped)``; ``clipped`` marks masked tokens whose clipped
    log-ratio is the active one (strictly).
    Shapes: ``logprobs``, ``old_logprobs``, ``mask`` ``[B, T]``, ``advantages`` ``[B]`` ->
    ``([B], [B, T] bool)``.
    """
    m = as_bool_mask(mask)
    n_tokens = m.sum(dim=-1)
    has_token = n_tokens > 0
    adv = torch.where(has_token, advantages, 0)
    sign = torch.sign(adv)[:, None]
    log_ratio = torch.where(m, logprobs - old_logprobs, 0)
    clipped_log_ratio = log_ratio.clamp(-clip_low, clip_high)
    clipped = (sign * clipped_log_ratio < sign * log_ratio) & m
    kept = torch.where(clipped, clipped_log_ratio, log_ratio)
    mean_log_ratio = kept.sum(dim=-1) / n_tokens.clamp_min(1).to(kept.dtype)
    ratio = torch.exp(mean_log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    return torch.where(has_token, -adv * ratio, 0), clipped


@dataclass(frozen=True)
class PolicyLoss:
    """A policy loss chosen by `algo.policy_loss`."""

    fn: Callable[..., tuple[Tensor, Tensor]]
    """``fn(logprobs, old_logprobs, advantages, mask, **knobs) -> (loss, restrained)``: the loss
    per token ``[B, T]`` (or per sequence ``[B]``) and a bool mask of the tokens (or sequences)
    whose update the method restrained: clipped ratios (ppo, cispo, gspo, gmpo), the detached
    tokens (clip_cov), the KL-penalised ones (kl_cov); logged as ``clip_frac``."""
    sequence_level: bool
    """One ratio and one advantage per sequence: ``fn`` returns a loss per sequence ``[B]``,
    which the trainer averages over the sequences (so ``algo.loss_agg`` must be
    seq-mean-token-mean), and the advantage estimator must give one advantage per sequence;
    tokens cannot be clipped, dual-clipped or importance-corrected one by one."""
    knobs: tuple[tuple[str, str], ...] = ()
    """``(keyword of fn, algo.<field> that sets it)``: the config keys this loss reads. A knob
    of another loss set with this one is a config error (it would do nothing)."""
    ratio_knobs: tuple[str, ...] = ()
    """The knobs (fields) that only act through the ratio pi / pi_old: inert when the update is
    one on-policy step (ratio exactly 1)."""
    needs_ratio: bool = False
    """The whole loss reduces to the plain policy gradient when the ratio is 1 (kl_cov): it needs
    an off-policy update (PPO mini-batches or epochs)."""
    needs_turns: bool = False
    """``fn`` also takes ``turn_ids`` ``[B, T]`` (TrainBatch.turn_ids: the turn of each token)."""


_PPO_CLIP = (("clip_low", "clip_low"), ("clip_high", "clip_high"))

# `algo.policy_loss`.
POLICY_LOSSES: dict[str, PolicyLoss] = {
    "ppo": PolicyLoss(
        ppo_clip_loss,
        sequence_level=False,
        knobs=(*_PPO_CLIP, ("dual_clip", "dual_clip")),
        ratio_knobs=("clip_low", "clip_high", "dual_clip"),
    ),
    "turn": PolicyLoss(
        turn_ratio_loss,
        sequence_level=False,
        knobs=_PPO_CLIP,
        ratio_knobs=("clip_low", "clip_high"),
        needs_turns=True,
    ),
    "gspo": PolicyLoss(
        gspo_loss,
        sequence_level=True,
        knobs=(("clip_low", "gspo_clip_low"), ("clip_high", "gspo_clip_high")),
        ratio_knobs=("gspo_clip_low", "gspo_clip_high"),
    ),
    "cispo": PolicyLoss(
        cispo_loss,
        sequence_level=False,
        knobs=(("clip_low", "cispo_clip_low"), ("clip_high", "cispo_clip_high")),
        ratio_knobs=("cispo_clip_low", "cispo_clip_high"),
    ),
    "clip_cov": PolicyLoss(
        clip_cov_loss,
        sequence_level=False,
        knobs=(
            *_PPO_CLIP,
            ("cov_ratio", "clip_cov_ratio"),
            ("cov_low", "clip_cov_low"),
            ("cov_high", "clip_cov_high"),
        ),
        ratio_knobs=("clip_low", "clip_high"),
    ),
    "kl_cov": PolicyLoss(
        kl_cov_loss,
        sequence_level=False,
        knobs=(("cov_ratio", "kl_cov_ratio"), ("kl_coef", "kl_cov_coef")),
        ratio_knobs=("kl_cov_ratio", "kl_cov_coef"),
        needs_ratio=True,
    ),
    "gmpo": PolicyLoss(
        gmpo_loss,
        sequence_level=True,
        knobs=(("clip_low", "gmpo_clip_low"), ("clip_high", "gmpo_clip_high")),
        ratio_knobs=("gmpo_clip_low", "gmpo_clip_high"),
    ),
}


def overlong_soft_penalty(lengths: Tensor, max_length: int, cache_length: int) -> Tensor:
    """DAPO soft overlong punishment (Yu et al. 2025, "DAPO", Eq. 13), added to the reward.

    With ``L_exp = max_length - cache_length``:
    ``R_len(L) = 0`` if ``L <= L_exp``; ``(L_exp - L) / cache_length`` if
    ``L_exp < L <= max_length`` (linear from 0 down to -1 over the buffer); ``-1`` beyond.
    ``cache_length = 0`` means no buffer (0 up to ``max_length``, -1 beyond).
    Shapes: ``lengths`` ``[B]`` (integer token counts) -> ``[B]`` float (default dtype, or the
    dtype of floating ``lengths``).
    Raises ValueError unless ``0 <= cache_length <= max_length``.
    """
    if not 0 <= cache_length <= max_length:
        raise ValueError(
            f"need 0 <= cache_length <= max_length, got {cache_length} and {max_length}"
        )
    dtype = lengths.dtype if lengths.is_floating_point() else torch.get_default_dtype()
    length = lengths.detach().to(dtype)
    expected = max_length - cache_length
    in_buffer = (expected - length) / max(cache_length, 1)
    penalty = torch.where(length <= expected, torch.zeros_like(length), in_buffer)
    return torch.where(length > max_length, torch.full_like(length, -1.0), penalty)


def overlong_filter_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """DAPO overlong filtering: truncated samples get an all-zero loss mask.

    ``m'_{b,t} = m_{b,t} * [not truncated_b]``: a truncated answer's reward says nothing about
    its quality, so it is dropped from the loss instead of being punished.
    Shapes: ``mask`` ``[B, T]`` (bool or float, dtype kept), ``truncated`` ``[B]`` bool ->
    ``[B, T]``.
    """
    return torch.where(truncated.bool()[:, None], torch.zeros_like(mask), mask)

"""The learner's last stage: a `TrainBatch` with its advantages -> one policy update.

Kept apart from the training loop (train/loop.py) so the loop reads as the list of stages it
is. Everything here works on token-aligned tensors: position t holds token t, its loss mask, its
behaviour logprob log pi_old(x_t | x_<t) and its advantage. The stages before it live beside it:
trajectories -> `TrainBatch` in batch.py, credit assignment (the advantages) in advantages.py.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agentic_rl.algos.losses import POLICY_LOSSES, aggregate_loss, kl_penalty, value_loss
from agentic_rl.algos.offpolicy import ROLLOUT_CORRECTIONS, rollout_mismatch
from agentic_rl.config.algo import AlgoConfig, rollout_correction, rollout_correction_low
from agentic_rl.config.rollout import max_sample_tokens
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import (
    TrainBatch,
    micro_batch_bounds,
    micro_batch_role,
    role_parts,
    row_tokens,
    tree_order,
)
from agentic_rl.model.critic import critic_values, reads_policy_states
from agentic_rl.model.load import autocast, token_logprobs
from agentic_rl.model.roles import as_role, role_policies
from agentic_rl.model.vision import vision_inputs

if TYPE_CHECKING:
    from agentic_rl.scale.fsdp import DataParallel


@torch.no_grad()
def forward_no_grad(
    model: nn.Module,
    batch: TrainBatch,
    chunk: int,
    micro: int,
    value_head: nn.Module | None = None,
    dp: DataParallel | None = None,
    share_prefix: bool = False,
    temperature: float = 1.0,
    max_tokens: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs (and values) without gradients, in micro-batches of at most `micro` rows and,
    with `max_tokens` > 0, that many tokens (optim.micro_batch_tokens): reference / critic /
    pi_old passes, logprobs at the sampling `temperature` (`sampling_temperature`).
    With `dp` (learner.strategy=fsdp2) each process runs its share of the rows; all get all.
    Rows stay in batch order, which keeps a group's rows (and their shared prompt) together;
    with `share_prefix`, a tree rollout's leaves are brought together (`tree_order`) and kept
    in one micro-batch where it fits (`micro_batch_bounds`), so their shared turns run once."""
    if dp is not None:  # (no prefix sharing: every process must run the same forwards)
        forward = functools.partial(forward_no_grad, temperature=temperature)
        return dp.forward_no_grad(forward, model, batch, chunk, micro, value_head)
    lps, vals = [], []
    device = next(model.parameters()).device  # trainer.device; results return to the batch's
    roles = role_policies(model)  # model.role_policies: each row through its role's policy
    rows = torch.arange(len(batch))
    trees = share_prefix and batch.tree_ids is not None
    chunks = [
        part[start:end]
        for part in role_parts(batch, tree_order(batch, rows) if trees else rows, bool(roles))
        for start, end in _bounds(batch, part, micro, share_prefix, max_tokens)
    ]
    for rows in chunks:
        mb = batch.select(rows).to(device)
        with as_role(model, micro_batch_role(mb, roles)) as role_model:
            lp, _, hidden = token_logprobs(
                role_model,
                mb.input_ids,
                mb.attention_mask,
                chunk,
                return_hidden=reads_policy_states(value_head),
                positions=mb.loss_mask > 0,
                share_prefix=share_prefix,
                temperature=temperature,
                model_inputs=vision_inputs(role_model, mb.images, device, mb.input_ids),
            )
        lps.append(lp * mb.loss_mask)
        if value_head is not None:  # V_t from the state that predicts token t (model/critic.py)
            values = critic_values(
                value_head, mb.input_ids, mb.attention_mask, hidden, mb.loss_mask > 0, share_prefix
            )
            vals.append(values * mb.loss_mask)
    home = batch.loss_mask.device
    order = torch.cat(chunks) if chunks else torch.arange(0)

    def in_batch_order(parts: list[torch.Tensor]) -> torch.Tensor:
        rows = torch.cat(parts).to(home)
        out = torch.empty_like(rows)
        out[order.to(home)] = rows  # role chunks may have reordered the rows
        return out

    return in_batch_order(lps), (in_batch_order(vals) if vals else None)


def adamw(params: list[nn.Parameter], **kwargs: float | tuple) -> torch.optim.AdamW:
    """torch.optim.AdamW fused into one kernel per step: 0.056 s vs 0.188 s per step for the
    default foreach implementation over the bundled model's 135M parameters on the 2-core CPU
    (measured); the same update up to float rounding. Also takes FSDP2's sharded parameters.

    The fused kernel writes the parameters without bumping their in-place version counters
    (torch 2.13; the foreach and for-loop implementations bump them). Consumers that detect
    new weights by those counters (the CPU generator's bf16 copy and cached KV) would keep
    serving the old weights, so every step bumps them here."""
    optimizer = torch.optim.AdamW(params, fused=True, **kwargs)
    optimizer.register_step_post_hook(_bump_versions)
    return optimizer


def _bump_versions(optimizer: torch.optim.Optimizer, *_: Any) -> None:
    from torch.autograd.graph import increment_version

    increment_version([p for group in optimizer.param_groups for p in group["params"]])


def sampling_temperature(cfg: Config) -> float:
    """The temperature the learner computes logprobs at: the rollouts' sampling temperature
    (rollout.temperature), so the learner's pi and the generator's behaviour logprobs are of one
    distribution; 1 for greedy rollouts (temperature 0), whose logprobs the generator reports at
    temperature 1."""
    return cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0


def recompute_old_logprobs(
    model: nn.Module, batch: TrainBatch, cfg: Config, dp: DataParallel | None = None
) -> None:
    """pi_old from the learner: the logprobs of every row of `batch` on the current weights, in
    the update's precision and at the sampling temperature, into batch.old_logprobs (0 off the
    mask; batch.old_recomputed marks it). Called once per batch: by `update` before its first
    mini-batch, or earlier by the trainer when the KL in the reward must be taken against it
    (train/batch.py prepare_batch, as veRL computes old_log_prob before the KL penalty)."""
    device = next(model.parameters()).device
    with autocast(cfg.learner.mixed_precision if dp is None else "no", device):
        batch.old_logprobs, _ = forward_no_grad(
            model,
            batch,
            cfg.model.logprob_chunk_size,
            cfg.optim.micro_batch_size,
            dp=dp,
            share_prefix=cfg.model.share_prefix and dp is None,
            temperature=sampling_temperature(cfg),
            max_tokens=cfg.optim.micro_batch_tokens,
        )
    batch.old_recomputed = True


def mini_batch_rows(n: int, count: int) -> list[torch.Tensor]:
    """The rows of each PPO mini-batch: 0..n-1 split in order into min(count, n) contiguous
    parts whose sizes differ by at most one (rows of a group or an episode stay together as far
    as the split allows)."""
    return list(torch.arange(n).tensor_split(max(min(count, n), 1)))


def update(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: TrainBatch,
    cfg: Config,
    value_head: nn.Module | None = None,
    dp: DataParallel | None = None,
) -> dict[str, float]:
    """`algo.epochs` passes over the batch, each `algo.ppo_mini_batches` optimizer steps of the
    clipped policy-gradient loss, one per PPO mini-batch (`mini_batch_rows`).

    pi_old, the ratio's denominator: with one mini-batch and one epoch, the current logprobs
    (ratio exactly 1: one on-policy policy-gradient step, no extra forward); otherwise the
    logprobs of the whole batch recomputed once, before the first mini-batch
    (algo.recompute_old_logprobs, stored in batch.old_logprobs), or the generator's behaviour
    logprobs. Every later mini-batch (and epoch) is then off-policy and the clip acts. The
    rollout correction (config.algo.rollout_correction) weighs each token's loss by
    pi_old / pi_behav; the mismatch between the two is measured on the sampled tokens.

    Micro-batch losses are normalised by the sequence / token counts of their whole mini-batch,
    so the accumulated gradient equals the mini-batch's full gradient whatever the micro-batch
    size, and whatever share of the rows each process runs under `dp` (learner.strategy=fsdp2).
    A mini-batch none of whose rows carries a gradient takes no optimizer step (AdamW would
    still move the weights on its moments)."""
    algo = cfg.algo
    assert batch.advantages is not None
    params = [p for p in model.parameters() if p.requires_grad]
    # A separate critic's gradient is clipped on its own (as veRL's critic is), so its value
    # loss cannot rescale the policy's step; a shared value head's is part of the policy's.
    critic_params = list(value_head.parameters()) if value_head is not None else []
    if reads_policy_states(value_head):
        params, critic_params = params + critic_params, []
    critic_grad_norms: list[float] = []
    # Prefix sharing changes how many forwards a micro-batch runs, which the processes of a
    # data-parallel learner must agree on: single process only.
    share_prefix = cfg.model.share_prefix and dp is None
    # One process: bf16 autocast here (FSDP2 applies its own mixed-precision policy).
    precision = cfg.learner.mixed_precision if dp is None else "no"
    device = next(model.parameters()).device
    groups = mini_batch_rows(len(batch), algo.ppo_mini_batches)
    on_policy = len(groups) == 1 and algo.epochs == 1 and algo.recompute_old_logprobs
    correction = (*rollout_correction(cfg), rollout_correction_low(cfg))
    if batch.stale:  # decoupled PPO (scale/async_rollout.correct_stale)
        if not algo.recompute_old_logprobs:
            raise ValueError("stale samples need the proximal policy: algo.recompute_old_logprobs")
        correction = ("tis", algo.stale_is_cap, None)
    # Observation tokens trained as if sampled (an ablation) have no behaviour logprobs.
    measurable = batch.behav_logprobs is not None and not cfg.rollout.train_on_observations
    mismatch = {"k3": 0.0, "tokens": 0.0, "max": 0.0}
    model.train()
    # pi_old, once, before the first step (unless the trainer already did, for the KL reward)
    if algo.recompute_old_logprobs and not on_policy and not batch.old_recomputed:
        recompute_old_logprobs(model, batch, cfg, dp)
    if batch.old_recomputed and measurable:
        assert batch.behav_logprobs is not None
        k3, delta = rollout_mismatch(batch.old_logprobs, batch.behav_logprobs, batch.loss_mask)
        mismatch = {
            "k3": float(k3.sum()),
            "tokens": float(batch.loss_mask.sum()),
            "max": float(delta.max()) if delta.numel() else 0.0,
        }
        measurable = False  # measured; else: on the first step's own forward passes
    all_rows = _rows_with_gradient(batch, algo, value_head, by_group=share_prefix)
    roles = role_policies(model)  # model.role_policies: a micro-batch per role
    if measurable and on_policy:
        # The one step's own forwards measure the rows it trains; the rows it skips (zero
        # advantage) are scored here, on the same pre-update weights, so the metric covers
        # every row as the recomputed pi_old's does.
        skipped = torch.arange(len(batch))[~torch.isin(torch.arange(len(batch)), all_rows)]
        if len(skipped):
            mismatch = _skipped_rows_mismatch(model, batch.select(skipped), cfg, dp)
    sums = {
        "loss": 0.0,
        "clip_frac": 0.0,
        "kl": 0.0,
        "entropy": 0.0,
        "value_loss": 0.0,
        "correction_weight": 0.0,
        "correction_zeroed": 0.0,
        "mismatch_k3": 0.0,
        "mismatch_tokens": 0.0,
    }
    grad_norms: list[float] = []
    tokens = 0.0
    for _ in range(algo.epochs):
        for group in groups:
            rows = all_rows[torch.isin(all_rows, group)]  # the length (group) order kept
            if len(rows) == 0:
                continue
            counts = {
                "num_sequences": len(group),
                "num_tokens": float(batch.loss_mask[group].sum().clamp(min=1)),
                "max_tokens": max_sample_tokens(cfg.rollout),  # Dr. GRPO's constant
            }
            # the value loss's token-mean runs over the tokens the critic is trained on
            value_mask = batch.loss_mask if batch.value_mask is None else batch.value_mask
            value_tokens = float(value_mask[group].sum().clamp(min=1))
            # Only the first step's forwards run on the weights the samples were scored with.
            measure = measurable and not grad_norms
            optimizer.zero_grad(set_to_none=True)
            parts = micro_batches(
                batch,
                rows,
                cfg.optim.micro_batch_size,
                dp,
                bool(roles),
                packed=share_prefix,
                max_tokens=cfg.optim.micro_batch_tokens,
            )
            for mb, weight in parts:
                mb = mb.to(device)  # trainer.device (a no-op on the CPU and under fsdp2)
                role = micro_batch_role(mb, roles)
                with autocast(precision, device), as_role(model, role) as role_model:
                    out = _micro_batch_loss(
                        role_model,
                        mb,
                        cfg,
                        counts,
                        value_head,
                        share_prefix,
                        keep_probs=dp is None,
                        on_policy=on_policy,
                        correction=correction,
                        measure=measure,
                        value_tokens=value_tokens,
                    )
                if out["loss"].requires_grad:  # (not: rows of a frozen role's policy)
                    (out["loss"] * weight).backward()
                for key in sums:
                    sums[key] += float(out[key].detach()) if weight and key in out else 0.0
                if measure and weight:
                    mismatch["max"] = max(mismatch["max"], float(out["mismatch_max"]))
            grad_norms.append(clip_grad_norm(params, cfg.optim.max_grad_norm))
            if critic_params:
                critic_grad_norms.append(clip_grad_norm(critic_params, cfg.optim.max_grad_norm))
            optimizer.step()
            tokens += float(batch.loss_mask[rows].sum())
    if dp is not None:  # each process summed its own micro-batches
        sums = dp.sum_over_processes(sums)
        mismatch["max"] = dp.max_over_processes(mismatch["max"])
    mismatch["k3"] += sums["mismatch_k3"]
    mismatch["tokens"] += sums["mismatch_tokens"]
    steps = len(grad_norms)
    # Diagnostics are means over the tokens actually processed (skipped rows have none).
    tokens = max(tokens, 1.0)
    metrics = {
        "trained_sequences": float(len(all_rows)),
        "loss": sums["loss"] / max(steps, 1),
        "clip_frac": sums["clip_frac"] / tokens,
        "kl": sums["kl"] / tokens,
        "entropy": sums["entropy"] / tokens,
        "value_loss": sums["value_loss"] / max(steps, 1),
        "grad_norm": sum(grad_norms) / max(steps, 1),
        "optimizer_steps": float(steps),
    }
    if critic_params:
        metrics["critic_grad_norm"] = sum(critic_grad_norms) / max(steps, 1)
    if correction[0] != "none":  # TIS: the mean truncated weight; masked IS: the kept fraction
        metrics["rollout_correction_weight"] = sums["correction_weight"] / tokens
        # the fraction of tokens the correction dropped (masked IS, IcePop: out of band)
        metrics["rollout_correction_zeroed"] = sums["correction_zeroed"] / tokens
    if mismatch["tokens"] > 0:  # behaviour vs learner logprobs on the sampled tokens
        metrics["mismatch_k3"] = mismatch["k3"] / mismatch["tokens"]
        metrics["mismatch_max_abs"] = mismatch["max"]
    return metrics


def clip_grad_norm(params: list[nn.Parameter], max_norm: float) -> float:
    """The global gradient norm of `params`, clipped to `max_norm` (0: not clipped).
    get_total_norm, not a sum of per-tensor norms: it also reduces sharded (fsdp2) gradients
    over the processes."""
    if max_norm > 0:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    grads = [p.grad for p in params if p.grad is not None]
    return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0


def micro_batches(
    batch: TrainBatch,
    rows: torch.Tensor,
    size: int,
    dp: DataParallel | None = None,
    by_role: bool = False,
    packed: bool = False,
    max_tokens: int = 0,
) -> Iterator[tuple[TrainBatch, float]]:
    """The micro-batches of `rows` this process runs, each with the weight of its loss: every
    one of them, weight 1, in a single process; with `dp`, this process's share (fsdp.py).
    `by_role`: no micro-batch mixes agent roles (`role_parts`; model.role_policies);
    `packed` (prefix sharing): a tree's leaves, consecutive in `rows`, are not split over
    micro-batches where they fit in one (`micro_batch_bounds`); `max_tokens` > 0: at most
    that many tokens a micro-batch as the pass runs them (optim.micro_batch_tokens; one process
    only, which config validation enforces)."""
    if dp is not None:
        yield from dp.micro_batches(batch, rows, size)
        return
    for part in role_parts(batch, rows, by_role):
        for start, end in _bounds(batch, part, size, packed, max_tokens):
            yield batch.select(part[start:end]), 1.0


def _bounds(
    batch: TrainBatch, rows: torch.Tensor, size: int, packed: bool, max_tokens: int = 0
) -> list[tuple[int, int]]:
    """`micro_batch_bounds` of `rows`: by their trees when `packed` (prefix sharing) and the
    batch has any; within `max_tokens` tokens (if > 0) as a packed or padded pass runs them."""
    trees = batch.tree_ids[rows].tolist() if packed and batch.tree_ids is not None else None
    tokens = None
    if max_tokens > 0:
        tokens = row_tokens(batch.input_ids[rows], batch.attention_mask[rows], packed)
    return micro_batch_bounds(len(rows), size, trees, tokens, max_tokens)


def _skipped_rows_mismatch(
    model: nn.Module, rows: TrainBatch, cfg: Config, dp: DataParallel | None
) -> dict[str, float]:
    """The mismatch sums (k3, tokens, max |d|) of `rows` that the update will not run: their
    learner logprobs on the current weights (a no-grad pass, as pi_old is recomputed) against
    their behaviour logprobs."""
    recompute_old_logprobs(model, rows, cfg, dp)  # `rows` is a copy (TrainBatch.select)
    assert rows.behav_logprobs is not None
    k3, delta = rollout_mismatch(rows.old_logprobs, rows.behav_logprobs, rows.loss_mask)
    return {
        "k3": float(k3.sum()),
        "tokens": float(rows.loss_mask.sum()),
        "max": float(delta.max()) if delta.numel() else 0.0,
    }


def _rows_with_gradient(
    batch: TrainBatch, algo: AlgoConfig, value_head: nn.Module | None, by_group: bool = False
) -> torch.Tensor:
    """Rows to run forward/backward on, sorted by length so micro-batches carry little padding;
    with `by_group`, by group first, so a micro-batch's rows share their group's prompt, and
    within a group by tree rollout (`tree_order`), so they share their tree's turns.

    With only the policy-gradient term, a sequence whose advantages are all zero contributes
    exactly zero gradient, so it is skipped; the loss normalisers still count it (they are the
    global counts), which keeps the gradient identical to the full computation."""
    mask = batch.loss_mask
    assert batch.advantages is not None
    rows = torch.arange(len(batch))
    if algo.kl_coef == 0 and algo.entropy_coef == 0 and value_head is None:
        rows = rows[(batch.advantages * mask != 0).any(dim=1)]
    lengths = batch.attention_mask[rows].sum(dim=1)
    rows = rows[torch.argsort(lengths, stable=True)]
    if by_group:
        rows = tree_order(batch, rows)
        rows = rows[torch.argsort(batch.group_ids[rows], stable=True)]
    return rows


def _micro_batch_loss(
    model: nn.Module,
    mb: TrainBatch,
    cfg: Config,
    counts: dict,
    value_head: nn.Module | None,
    share_prefix: bool = False,
    keep_probs: bool = False,
    on_policy: bool = True,
    correction: tuple[str, float, float | None] = ("none", 0.0, None),
    measure: bool = False,
    value_tokens: float | None = None,
) -> dict[str, torch.Tensor]:
    """The micro-batch's loss (normalised by its mini-batch's `counts`) and metric sums.
    on_policy: pi_old is the current logprobs (detached), else mb.old_logprobs; correction:
    (mode, cap, the band's lower bound or None) of the rollout correction; measure: also
    return the mismatch sums; value_tokens: the mini-batch's count of the tokens the critic is
    trained on (mb.value_mask; None = counts["num_tokens"], every trained token), the value
    loss's normaliser. The policy loss is `algo.policy_loss`'s entry of POLICY_LOSSES,
    called with its knobs from the config; its `clip_frac` counts the tokens it restrained."""
    algo, mask = cfg.algo, mb.loss_mask
    logprobs, entropy, hidden = token_logprobs(
        model,
        mb.input_ids,
        mb.attention_mask,
        cfg.model.logprob_chunk_size,
        with_entropy=True,
        return_hidden=reads_policy_states(value_head),
        positions=mask > 0,
        share_prefix=share_prefix,
        entropy_grad=algo.entropy_coef > 0,
        # Single process only: a 1-process fsdp2 run drifted from the plain run with it (0.2%
        # of the gradient norm after the warm start) while the 2-process update test matched.
        keep_probs=keep_probs,
        temperature=sampling_temperature(cfg),
        # a vision-language policy's images: the pixels the generator saw (model/vision.py)
        model_inputs=vision_inputs(model, mb.images, mb.input_ids.device, mb.input_ids),
    )
    # One on-policy pass: the ratio is exactly 1 (old = current, detached), the gradient is the
    # plain policy gradient. Otherwise pi_old is mb.old_logprobs (recomputed once by update(),
    # or the generator's behaviour logprobs).
    old = logprobs.detach() if on_policy else mb.old_logprobs
    mode, cap, low = correction
    behav = mb.behav_logprobs
    # pi_old / pi_behav as a weight per token (1 = fresh, matching samples); no gradient.
    weights = None
    if mode != "none" and behav is not None:
        band = () if low is None else (low,)  # IcePop's lower bound (algos/offpolicy.py)
        weights = ROLLOUT_CORRECTIONS[mode](old, behav, mask, cap, *band)
    metrics: dict[str, torch.Tensor] = {}
    if weights is not None:
        metrics["correction_weight"] = (weights * mask).sum()
        metrics["correction_zeroed"] = ((weights == 0) & (mask > 0)).sum().float()
    if measure and behav is not None:  # the first step's forward: pre-update weights
        k3, delta = rollout_mismatch(logprobs.detach(), behav, mask)
        metrics["mismatch_k3"], metrics["mismatch_max"] = k3.sum(), delta.max()
        metrics["mismatch_tokens"] = (mask > 0).sum().float()
    spec = POLICY_LOSSES[algo.policy_loss]
    knobs = {keyword: getattr(algo, field) for keyword, field in spec.knobs}
    if spec.sequence_level:
        # One ratio and one advantage per sequence; the loss is a mean over the GLOBAL number
        # of sequences (config enforces seq-mean aggregation), so micro-batches add up exactly.
        seq_adv = (mb.advantages * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        per_seq, restrained = spec.fn(logprobs, old, seq_adv, mask, **knobs)
        if weights is not None:  # a sequence-level correction (config): one weight a sequence
            per_seq = per_seq * weights.amax(-1)
        loss = per_seq.sum() / max(counts["num_sequences"], 1)
        # gspo restrains whole sequences [B], gmpo single tokens [B, T]
        clipped = (restrained[:, None] if restrained.dim() == 1 else restrained) & (mask > 0)
    else:
        if spec.needs_turns:  # one ratio per turn (TrainBatch.turn_ids, filled by collate)
            knobs["turn_ids"] = mb.turn_ids
        pg, clipped = spec.fn(logprobs, old, mb.advantages, mask, **knobs)
        if weights is not None:  # with "tis" and stale samples: decoupled PPO (offpolicy.py)
            pg = pg * weights
        loss = aggregate_loss(pg, mask, algo.loss_agg, **counts)
    kl_sum = torch.zeros(())
    if mb.ref_logprobs is not None:
        kl = kl_penalty(logprobs, mb.ref_logprobs, algo.kl_estimator) * mask
        kl_sum = kl.detach().sum()
        if not algo.kl_in_reward:
            loss = loss + algo.kl_coef * aggregate_loss(kl, mask, algo.loss_agg, **counts)
    if algo.entropy_coef > 0:
        loss = loss - algo.entropy_coef * aggregate_loss(entropy, mask, algo.loss_agg, **counts)
    vloss = torch.zeros(())
    if value_head is not None:  # V_t from the state that predicts token t (model/critic.py)
        values = critic_values(
            value_head, mb.input_ids, mb.attention_mask, hidden, mask > 0, share_prefix
        )
        # turn_ppo trains its critic only at each turn's first token (mb.value_mask)
        value_mask = mask if mb.value_mask is None else mb.value_mask * mask
        per_token = value_loss(values, mb.old_values, mb.returns, value_mask, clip=algo.value_clip)
        vloss = aggregate_loss(
            per_token,
            value_mask,
            "token-mean",
            num_tokens=counts["num_tokens"] if value_tokens is None else value_tokens,
        )
        loss = loss + algo.value_coef * vloss
    return {
        "loss": loss,
        "clip_frac": (clipped.float() * mask).sum(),
        "kl": kl_sum,
        "entropy": (entropy.detach() * mask).sum(),
        "value_loss": vloss.detach(),
        **metrics,
    }

"""Token logprobs (and entropy) under the vocabulary projection, with a hand-written backward.

For hidden states h [M, H], the output embedding W [V, H] and targets y [M]:

    z = h W^T                      logits [M, V]
    log p(y) = z_y - logsumexp(z)
    H(p) = logsumexp(z) - sum_v p_v z_v

and the gradients (g = dL/dlog p(y), e = dL/dH, p = softmax(z), log p = z - logsumexp(z)):

    dL/dz = g (onehot(y) - p) - e p (log p + H)
    dL/dh = dL/dz W,    dL/dW = (dL/dz)^T h

Two ways to feed the backward pass: keep p [M, V] (in the weight's dtype, `keep_probs`: no
recomputation; token_logprobs does this up to KEPT_PROBS_BYTES), or keep only h, W, y,
logsumexp(z) and H and recompute z once, so the memory of a chunk of logits is never held
between the passes (what activation checkpointing of the plain formula does, minus re-running
its whole forward before a generic backward). The softmax algebra runs over ROWS_PER_BLOCK rows
at a time so that its passes stay in cache.

Measured on the vs_trl batch (bundled model, bf16, 2 micro-batches of ~400 answer tokens,
interleaved runs): replacing checkpointing by this function 2.88 -> 2.83 s an update (noise);
keeping p 2.48 -> 2.39 s; one weight cast per call and row blocks brought the update to ~2.1 s.

Output heads that are more than h W^T (`OutputHead`): the logits a model's own forward samples
from are z = c tanh(u / c) with u = s (h W^T + b): an lm_head bias b (Phi, GPT-J, CodeGen), a
scale s (Cohere's logit_scale, Granite's 1 / logits_scaling) and a soft cap c (Gemma-2's
final_logit_softcapping), then divided by the sampling temperature T (z / T, what the generator
samples from). The softmax algebra above runs on z / T, and the chain rule adds
dL/du = dL/dz (1 - tanh^2(u / c)) / T and dL/d(h W^T) = dL/db = s dL/du. The transform runs in
float32 per row block; a plain head (no bias, s = 1, no cap) takes exactly the code path
without it. A soft cap needs z in the backward pass, so it always recomputes (no kept p).

Ids the policy never samples (`OutputHead.masked`: a vision-language model's image placeholder
tokens, model/vision.py `never_sampled_ids`): their logits are set to MASKED_LOGIT last, by
`mask_logits`, the function the generator (backends/hf.py) applies to the logits it samples
from, so the learner's softmax is the sampling distribution (the masked ids' mass renormalised
away) and learner logprobs equal the behaviour logprobs. Their gradient is 0 (p = 0 there).

The products run in the weight's dtype in both passes (under autocast, `token_logprobs` passes
the weight cast once per call, not once per chunk and pass: the cast of a 49k x 576 embedding
costs as much as its product with a few hundred states); the softmax algebra is at least
float32 throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

ROWS_PER_BLOCK = 32
"""The softmax algebra runs over this many rows of logits at a time: 32 x 49k float32 values
(6 MB) stay in cache across its passes, where all rows at once stream every pass through
memory. 4x faster on the 2-core machine for 472 rows of the bundled model's vocabulary
(35 ms vs 150 ms, measured; 8 or 16 rows per block pay more per-operation overhead)."""


MASKED_LOGIT = -1e9
"""The logit of an id the policy never samples. exp(MASKED_LOGIT - logsumexp) is exactly 0 in
float32 and float64, so its probability is 0 and the others' are those of the softmax without
it, as with -inf; unlike -inf it keeps p log p (the entropy) and the entropy's gradient free of
0 x inf = NaN."""


def mask_logits(logits: torch.Tensor, ids: torch.Tensor | Sequence[int] | None) -> torch.Tensor:
    """logits [..., V] with the vocabulary entries `ids` [K] set to MASKED_LOGIT (a new tensor;
    `logits` itself is unchanged; no ids: `logits`). The one place masked ids are applied: the
    generator samples from these logits and the learner's softmax runs on them
    (`OutputHead.masked`), so both score the same distribution."""
    if ids is None or len(ids) == 0:
        return logits
    index = torch.as_tensor(ids, dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, index, MASKED_LOGIT)


def _row_blocks(total: int) -> list[slice]:
    return [slice(start, start + ROWS_PER_BLOCK) for start in range(0, total, ROWS_PER_BLOCK)]


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half-precision logits; float64 stays float64."""
    return torch.promote_types(x.dtype, torch.float32)


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    return x.to(_float_dtype(x))


@dataclass(frozen=True)
class OutputHead:
    """What a model's forward does to h W^T before its softmax: logits = c tanh(u / c),
    u = scale (h W^T + bias); softcap c = 0 means no cap; then the sampler's / temperature;
    then the ids the policy never samples are masked (`mask_logits`). See the module
    docstring."""

    bias: torch.Tensor | None = None  # [V]
    scale: float = 1.0
    softcap: float = 0.0
    temperature: float = 1.0
    masked: torch.Tensor | None = None  # [K] long: ids never sampled (on the weight's device)

    @property
    def plain(self) -> bool:
        return (
            self.bias is None
            and self.scale == 1.0
            and not self.softcap
            and self.temperature == 1
            and self.masked is None
        )


PLAIN_HEAD = OutputHead()


def _logits(product: torch.Tensor, head: OutputHead) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(z, tanh(u / c) or None) for rows of h W^T; z is `product` itself for a plain head, else
    float32 (at least)."""
    if head.plain:
        return product, None
    u = _at_least_float32(product)
    if head.bias is not None:
        u = u + head.bias.to(u.dtype)
    if head.scale != 1.0:
        u = u * head.scale
    if not head.softcap:
        z = u / head.temperature if head.temperature != 1 else u
        return mask_logits(z, head.masked), None
    capped = torch.tanh(u / head.softcap)
    return mask_logits(capped * (head.softcap / head.temperature), head.masked), capped


class VocabLogprobs(torch.autograd.Function):
    """`apply(hidden [M, H], weight [V, H], bias [V] or None, targets [M], with_entropy,
    entropy_grad, keep_probs, scale, softcap, temperature, masked [K] or None)` -> (logprobs
    [M], entropy [M]) in float32;
    entropy is zeros without `with_entropy` and carries no gradient without `entropy_grad` (a
    logged metric). keep_probs: keep softmax(z) [M, V] in the weight's dtype for the backward
    pass instead of recomputing z (not used when the entropy needs a gradient, or with a soft
    cap). bias, scale, softcap, temperature, masked: the `OutputHead`."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        with_entropy: bool,
        entropy_grad: bool,
        keep_probs: bool = False,
        scale: float = 1.0,
        softcap: float = 0.0,
        temperature: float = 1.0,
        masked: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        head = OutputHead(bias, scale, softcap, temperature, masked)
        # One compute dtype, the weight's: token_logprobs casts it once per call under autocast.
        states = hidden.to(weight.dtype)
        product = F.linear(states, weight)  # [M, V]
        entropy_grad = with_entropy and entropy_grad
        keep_probs = keep_probs and not entropy_grad and not softcap
        kept = torch.empty_like(product) if keep_probs else None
        logprobs, log_z, entropy = (
            product.new_empty(len(product), dtype=_float_dtype(product)) for _ in "abc"
        )
        for rows in _row_blocks(len(product)):
            logits, _ = _logits(product[rows], head)
            logp = torch.log_softmax(logits, dim=-1, dtype=_float_dtype(logits))
            picked = targets[rows].unsqueeze(-1)
            logprobs[rows] = logp.gather(-1, picked).squeeze(-1)
            log_z[rows] = logits.gather(-1, picked).squeeze(-1) - logprobs[rows]
            if with_entropy or keep_probs:
                probs = logp.exp()
                if kept is not None:
                    kept[rows] = probs
                # sum_v p_v log p_v as a batched dot product (one pass over both)
                entropy[rows] = -torch.bmm(probs.unsqueeze(1), logp.unsqueeze(2)).view(-1)
        if not with_entropy:
            entropy.zero_()
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        ctx.set_materialize_grads(False)
        ctx.entropy_grad = entropy_grad
        ctx.hidden_dtype = hidden.dtype
        ctx.scale, ctx.softcap, ctx.temperature = scale, softcap, temperature
        ctx.save_for_backward(states, weight, bias, targets, log_z, entropy, kept, masked)
        return logprobs, entropy

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        states, weight, bias, targets, log_z, entropy, kept, masked = ctx.saved_tensors
        head = OutputHead(bias, ctx.scale, ctx.softcap, ctx.temperature, masked)
        if not ctx.entropy_grad:
            grad_entropy = None
        if grad_logprobs is None and grad_entropy is None:
            return (None,) * 11
        if kept is not None and grad_logprobs is not None:
            # dL/dz = g (onehot(y) - p), in the weight's dtype like the products it feeds
            g = grad_logprobs.to(kept.dtype).unsqueeze(-1)
            grad_logits = (kept * g).neg_().scatter_add_(-1, targets.unsqueeze(-1), g)
            if head.scale != head.temperature:  # (no soft cap here: it always recomputes)
                grad_logits.mul_(head.scale / head.temperature)
        else:
            grad_logits = _recomputed_grad_logits(
                states, weight, targets, log_z, entropy, grad_logprobs, grad_entropy, head
            )
        if masked is not None:  # a masked logit is a constant: no gradient reaches h W^T
            grad_logits.index_fill_(-1, masked, 0)
        grad_hidden = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad_logits @ weight).to(ctx.hidden_dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_logits.t() @ states
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_logits.sum(0, dtype=_float_dtype(grad_logits)).to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, *(None,) * 8


def _recomputed_grad_logits(
    states: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    log_z: torch.Tensor,
    entropy: torch.Tensor,
    grad_logprobs: torch.Tensor | None,
    grad_entropy: torch.Tensor | None,
    head: OutputHead = PLAIN_HEAD,
) -> torch.Tensor:
    """dL/d(h W^T) [M, V] in the weight's dtype, from z recomputed: for a plain head
    dL/dz = onehot(y) g - p (g + e (log p + H)), else that times s (1 - tanh^2(u / c)) / T."""
    product = F.linear(states, weight)
    grad_logits = torch.empty_like(product)
    for rows in _row_blocks(len(product)):
        logits, capped = _logits(product[rows], head)
        logp = _at_least_float32(logits).sub_(log_z[rows].unsqueeze(-1))
        probs = logp.exp()
        factor = torch.zeros_like(logp[:, :1])
        if grad_logprobs is not None:
            factor = factor + grad_logprobs[rows].to(logp.dtype).unsqueeze(-1)
        if grad_entropy is not None:
            scale = grad_entropy[rows].to(logp.dtype).unsqueeze(-1)
            factor = factor + scale * logp.add_(entropy[rows].unsqueeze(-1))
        block = probs.mul_(factor).neg_()
        if grad_logprobs is not None:
            picked = targets[rows].unsqueeze(-1)
            block.scatter_add_(-1, picked, grad_logprobs[rows].to(logp.dtype).unsqueeze(-1))
        if capped is not None:  # dz/du = 1 - tanh^2(u / c)
            block.mul_(1 - capped.square())
        if head.scale != head.temperature:
            block.mul_(head.scale / head.temperature)
        grad_logits[rows] = block
    return grad_logits


def vocab_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    keep_probs: bool = False,
    head: OutputHead = PLAIN_HEAD,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs of `targets` and the entropy at each of the M states (see the module docstring).

    hidden [M, H], weight [V, H], targets [M] -> (logprobs [M], entropy [M]), float32.
    keep_probs trades M x V values of memory for the backward pass's recomputation. head: the
    model's bias / scale / soft cap on h W^T (model/load.py `output_head`)."""
    return VocabLogprobs.apply(
        hidden,
        weight,
        head.bias,
        targets,
        with_entropy,
        entropy_grad,
        keep_probs,
        head.scale,
        head.softcap,
        head.temperature,
        head.masked,
    )

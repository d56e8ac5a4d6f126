"""Token logprobs (and entropy) under the vocabulary projection, with a hand-written backward.

For hidden states h [M, H], the output embedding W [V, H] and targets y [M]:

    z = h W^T                      logits [M, V]
    log p(y) = z_y - logsumexp(z)
    H(p) = logsumexp(z) - sum_v p_v z_v

and the gradients (g = dL/dlog p(y), e = dL/dH, p = softmax(z), log p = z - logsumexp(z)):

    dL/dz = g (onehot(y) - p) - e p (log p + H)
    dL/dh = dL/dz W,    dL/dW = (dL/dz)^T h

Only h, W, y, logsumexp(z) and H are kept for the backward pass, which recomputes z once: the
memory of one chunk of logits is never held between the passes. Activation checkpointing of the
plain formula does the same, but re-runs the whole forward (logsumexp, the entropy's softmax)
before a generic backward through it; this needs one exponential. Measured on the bundled model
(bf16 autocast, 2 micro-batches of 8 rows x ~50 answer tokens, 5 updates each, interleaved):
median update 2.83 s vs 2.88 s with checkpointing, within the noise; the vocabulary's
elementwise passes are a few percent of an update either way.

The products run in the weight's dtype in both passes (under autocast, `token_logprobs` passes
the weight cast once per call, not once per chunk and pass: the cast of a 49k x 576 embedding
costs as much as its product with a few hundred states); the softmax algebra is at least
float32 throughout.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision logits; float64 stays float64 (a copy only when cast)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


class VocabLogprobs(torch.autograd.Function):
    """`apply(hidden [M, H], weight [V, H], targets [M], with_entropy, entropy_grad,
    keep_probs)` -> (logprobs [M], entropy [M]) in float32; entropy is zeros without
    `with_entropy` and carries no gradient without `entropy_grad` (a logged metric).
    keep_probs: keep softmax(z) [M, V] in the weight's dtype for the backward pass instead of
    recomputing z (not used when the entropy needs a gradient)."""

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        with_entropy: bool,
        entropy_grad: bool,
        keep_probs: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # One compute dtype, the weight's: token_logprobs casts it once per call under autocast.
        states = hidden.to(weight.dtype)
        logits = _at_least_float32(F.linear(states, weight))
        log_z = torch.logsumexp(logits, dim=-1)
        logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
        entropy_grad = with_entropy and entropy_grad
        keep_probs = keep_probs and not entropy_grad
        kept = None
        if with_entropy or keep_probs:
            logp = logits.sub_(log_z.unsqueeze(-1))
            probs = logp.exp()
            entropy = -(probs * logp).sum(-1) if with_entropy else torch.zeros_like(logprobs)
            kept = probs.to(weight.dtype) if keep_probs else None
        else:
            entropy = torch.zeros_like(logprobs)
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        ctx.set_materialize_grads(False)
        ctx.entropy_grad = entropy_grad
        ctx.hidden_dtype = hidden.dtype
        ctx.save_for_backward(states, weight, targets, log_z, entropy, kept)
        return logprobs, entropy

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(
        ctx: Any, grad_logprobs: torch.Tensor | None, grad_entropy: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        states, weight, targets, log_z, entropy, kept = ctx.saved_tensors
        if not ctx.entropy_grad:
            grad_entropy = None
        if grad_logprobs is None and grad_entropy is None:
            return None, None, None, None, None, None
        if kept is not None and grad_logprobs is not None:
            # dL/dz = g (onehot(y) - p), in the weight's dtype like the products it feeds
            g = grad_logprobs.to(kept.dtype).unsqueeze(-1)
            grad_logits = (kept * g).neg_().scatter_add_(-1, targets.unsqueeze(-1), g)
        else:
            grad_logits = _recomputed_grad_logits(
                states, weight, targets, log_z, entropy, grad_logprobs, grad_entropy
            )
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = (grad_logits @ weight).to(ctx.hidden_dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_logits.t() @ states
        return grad_hidden, grad_weight, None, None, None, None


def _recomputed_grad_logits(
    states: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    log_z: torch.Tensor,
    entropy: torch.Tensor,
    grad_logprobs: torch.Tensor | None,
    grad_entropy: torch.Tensor | None,
) -> torch.Tensor:
    """dL/dz [M, V] in the weight's dtype, from z recomputed: onehot(y) g - p (g + e (log p + H))."""
    logp = _at_least_float32(F.linear(states, weight)).sub_(log_z.unsqueeze(-1))
    probs = logp.exp()
    factor = torch.zeros_like(log_z) if grad_logprobs is None else grad_logprobs.to(logp.dtype)
    factor = factor.unsqueeze(-1)
    if grad_entropy is not None:
        factor = factor + grad_entropy.to(logp.dtype).unsqueeze(-1) * logp.add_(
            entropy.unsqueeze(-1)
        )
    grad_logits = probs.mul_(factor).neg_()
    if grad_logprobs is not None:
        grad_logits.scatter_add_(-1, targets.unsqueeze(-1), grad_logprobs.to(logp.dtype)[:, None])
    return grad_logits.to(weight.dtype)


def vocab_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    keep_probs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs of `targets` and the entropy at each of the M states (see the module docstring).

    hidden [M, H], weight [V, H], targets [M] -> (logprobs [M], entropy [M]), float32.
    keep_probs trades M x V values of memory for the backward pass's recomputation."""
    return VocabLogprobs.apply(hidden, weight, targets, with_entropy, entropy_grad, keep_probs)

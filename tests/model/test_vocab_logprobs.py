"""vocab_logprobs: hand-computed values and gradients, and the plain autograd formula as the
reference for the hand-written backward pass."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.model.vocab_logprobs import (
    ROWS_PER_BLOCK,
    OutputHead,
    mask_logits,
    vocab_logprobs,
)


def _reference(hidden, weight, targets):
    logits = hidden @ weight.t()
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


def test_hand_computed_logprob_entropy_and_gradient() -> None:
    # z = h W^T = [1, 0, 0]; p = [e, 1, 1] / (e + 2)
    hidden = torch.tensor([[1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    lp, ent = vocab_logprobs(hidden, weight, torch.tensor([0]), with_entropy=True)
    z = math.e + 2
    p0, p1 = math.e / z, 1 / z
    assert lp.item() == pytest.approx(1 - math.log(z))  # -0.551444
    assert ent.item() == pytest.approx(-(p0 * math.log(p0) + 2 * p1 * math.log(p1)))  # 0.975326
    lp.sum().backward()
    # dlogp/dh = (onehot - p) W = [1 - p0, -p1]
    assert hidden.grad.tolist()[0] == pytest.approx([1 - p0, -p1])  # [0.423883, -0.211942]


@pytest.mark.parametrize("keep_probs", [False, True])
@pytest.mark.parametrize("rows", [7, 2 * ROWS_PER_BLOCK + 5])  # one block, several blocks
@pytest.mark.parametrize("entropy_grad", [True, False])
def test_gradients_match_autograd_of_the_plain_formula(entropy_grad, rows, keep_probs) -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(rows, 5, generator=g, dtype=torch.float64)
    weight = torch.randn(11, 5, generator=g, dtype=torch.float64)
    targets = torch.randint(0, 11, (rows,), generator=g)
    a = torch.randn(rows, generator=g, dtype=torch.float64)
    b = torch.randn(rows, generator=g, dtype=torch.float64)
    grads = []
    for fn in ("ours", "reference"):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fn == "ours":
            lp, ent = vocab_logprobs(h, w, targets, True, entropy_grad, keep_probs=keep_probs)
            assert ent.requires_grad == entropy_grad
        else:
            lp, ent = _reference(h, w, targets)
            ent = ent if entropy_grad else ent.detach()
        loss = (a * lp).sum() + ((b * ent).sum() if ent.requires_grad else 0)
        loss.backward()
        grads.append((lp.detach(), ent.detach(), h.grad, w.grad))
    for ours, ref in zip(*grads, strict=True):
        torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-10)


def test_gradcheck_with_entropy_term() -> None:
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 5, 2, 2])
    assert torch.autograd.gradcheck(
        lambda h, w: vocab_logprobs(h, w, targets, True, True), (hidden, weight)
    )


def test_frozen_weight_and_no_entropy() -> None:
    hidden = torch.randn(3, 4, requires_grad=True)
    weight = torch.randn(9, 4)  # e.g. a LoRA run: the output embedding is frozen
    targets = torch.tensor([1, 2, 8])
    lp, ent = vocab_logprobs(hidden, weight, targets)
    assert torch.equal(ent, torch.zeros(3)) and not ent.requires_grad
    lp.sum().backward()
    h = hidden.detach().clone().requires_grad_()
    _reference(h, weight, targets)[0].sum().backward()
    torch.testing.assert_close(hidden.grad, h.grad)


def test_bf16_autocast_is_close_to_float32() -> None:
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(16, 32, generator=g, requires_grad=True)
    weight = (0.2 * torch.randn(200, 32, generator=g)).requires_grad_()
    targets = torch.randint(0, 200, (16,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, _ = vocab_logprobs(hidden, weight, targets)
    assert lp.dtype == torch.float32
    lp.sum().backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32
    h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref, _ = _reference(h, w, targets)
    ref.sum().backward()
    torch.testing.assert_close(lp, ref, atol=0.05, rtol=0.02)
    torch.testing.assert_close(hidden.grad, h.grad, atol=0.05, rtol=0.05)
    torch.testing.assert_close(weight.grad, w.grad, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_kept_probabilities_give_the_recomputed_gradients(dtype) -> None:
    """keep_probs (softmax kept from the forward pass) vs recomputation in the backward pass."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(6, 8, generator=g, dtype=torch.float64).to(dtype)
    weight = torch.randn(30, 8, generator=g, dtype=torch.float64).to(dtype)
    targets = torch.randint(0, 30, (6,), generator=g)
    scale = torch.randn(6, generator=g, dtype=torch.float64)
    grads = []
    for keep in (False, True):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        lp, ent = vocab_logprobs(h, w, targets, True, entropy_grad=False, keep_probs=keep)
        (lp * scale).sum().backward()
        grads.append((lp.detach(), ent, h.grad.double(), w.grad.double()))
    tol = {"atol": 1e-12, "rtol": 1e-10} if dtype == torch.float64 else {"atol": 0.03, "rtol": 0.03}
    for kept, recomputed in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(kept.double(), recomputed.double(), **tol)


def test_kept_probabilities_are_ignored_when_the_entropy_needs_a_gradient() -> None:
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(5, 4, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(9, 4, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 1, 2, 3, 8])
    assert torch.autograd.gradcheck(
        lambda h, w: vocab_logprobs(h, w, targets, True, True, keep_probs=True), (hidden, weight)
    )


def test_masked_ids_hand_computed() -> None:
    """z = h W^T = [1, 0, 0] with id 1 masked (never sampled): p = [e, 0, 1] / (e + 1)."""
    hidden = torch.tensor([[1.0, 0.0]], dtype=torch.float64, requires_grad=True)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    head = OutputHead(masked=torch.tensor([1]))
    lp, ent = vocab_logprobs(hidden, weight, torch.tensor([0]), with_entropy=True, head=head)
    p0, p2 = math.e / (math.e + 1), 1 / (math.e + 1)
    assert lp.item() == pytest.approx(math.log(p0))  # -0.313262
    assert ent.item() == pytest.approx(-(p0 * math.log(p0) + p2 * math.log(p2)))  # 0.582203
    lp.sum().backward()
    # dlogp/dh = (onehot - p) W = [1 - p0, -0 * 1] (the masked row carries no gradient)
    assert hidden.grad.tolist()[0] == pytest.approx([1 - p0, 0.0])  # [0.268941, 0]


@pytest.mark.parametrize("keep_probs", [False, True])
@pytest.mark.parametrize("entropy_grad", [True, False])
def test_masked_ids_gradients_match_autograd_of_the_masked_formula(entropy_grad, keep_probs):
    """The masked head's values and gradients are autograd's through `mask_logits` (finite:
    no 0 x inf in the entropy or its gradient)."""
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(9, 5, generator=g, dtype=torch.float64)
    weight = torch.randn(11, 5, generator=g, dtype=torch.float64)
    masked = torch.tensor([3, 7])
    targets = torch.tensor([0, 1, 2, 4, 5, 6, 8, 9, 10])  # sampled tokens: never a masked id
    a = torch.randn(9, generator=g, dtype=torch.float64)
    b = torch.randn(9, generator=g, dtype=torch.float64)
    grads = []
    for fn in ("ours", "reference"):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fn == "ours":
            head = OutputHead(masked=masked)
            lp, ent = vocab_logprobs(h, w, targets, True, entropy_grad, keep_probs, head=head)
        else:
            logp = torch.log_softmax(mask_logits(h @ w.t(), masked), dim=-1)
            lp = logp.gather(-1, targets[:, None]).squeeze(-1)
            ent = -(logp.exp() * logp).sum(-1)
            ent = ent if entropy_grad else ent.detach()
        loss = (a * lp).sum() + ((b * ent).sum() if ent.requires_grad else 0)
        loss.backward()
        grads.append((lp.detach(), ent.detach(), h.grad, w.grad))
    for ours, ref in zip(*grads, strict=True):
        assert torch.isfinite(ours).all()
        torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-10)
    assert torch.equal(grads[0][3][masked], torch.zeros(2, 5))  # the masked rows do not learn

"""HFGenerator sampling internals: inverse-CDF sampling, top-p shortcut, the bf16 weight copy."""

from __future__ import annotations

import copy

import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.sampling import SAMPLING_BLOCK, draw_tokens, top_p_filter
from agentic_rl.types import SamplingParams


def test_inverse_cdf_sampling_matches_the_probabilities() -> None:
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]]).expand(20_000, -1)
    u = torch.rand(20_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts = torch.bincount(draw_tokens(probs, u), minlength=4).double() / 20_000
    assert counts[1] == 0  # a zero-probability token (outside top-p) is never drawn
    torch.testing.assert_close(
        counts, torch.tensor([0.1, 0.0, 0.6, 0.3]).double(), atol=0.012, rtol=0
    )


def test_two_level_cdf_picks_the_token_of_the_one_level_cdf() -> None:
    """Same uniform draw -> same token as a float64 cumulative sum over the whole vocabulary,
    on a vocabulary that is not a multiple of the block size, with zero-probability tokens."""
    g = torch.Generator().manual_seed(5)
    logits = 3 * torch.randn(64, 1000, generator=g)
    logits[:, ::3] = float("-inf")  # a third of the tokens outside the nucleus
    probs = torch.softmax(logits, dim=-1)
    u = torch.rand(64, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    ours = draw_tokens(probs, u)
    cdf = probs.double().cumsum(-1)
    reference = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True).squeeze(-1)
    assert torch.equal(ours, reference)
    assert SAMPLING_BLOCK < 1000 and bool((probs.gather(-1, ours[:, None]) > 0).all())


def test_zero_probability_tokens_are_never_drawn() -> None:
    """Each row: one block whose only nonzero entry is its first token, plus tiny masses
    elsewhere; 2,000 draws per row never land on a zero-probability token."""
    probs = torch.zeros(8, 3 * SAMPLING_BLOCK + 7)
    probs[:, SAMPLING_BLOCK] = 1.0
    probs[:, 5] = 1e-3
    probs[:, -1] = 1e-7
    probs = probs.repeat(250, 1)
    drawn = draw_tokens(
        probs, torch.rand(2000, generator=torch.Generator().manual_seed(0)).double()
    )
    assert set(drawn.unique().tolist()) <= {5, SAMPLING_BLOCK, probs.shape[1] - 1}


def test_a_rows_token_depends_only_on_its_own_probabilities_and_uniform() -> None:
    probs = torch.softmax(torch.randn(16, 1000, generator=torch.Generator().manual_seed(1)), -1)
    u = torch.rand(16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    a = draw_tokens(probs, u)
    order = torch.randperm(16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(draw_tokens(probs[order], u[order]), a[order]) and a.shape == (16,)
    assert torch.equal(draw_tokens(probs[3:5], u[3:5]), a[3:5])


def test_top_p_of_one_masks_nothing_and_skips_the_sort() -> None:
    logits = torch.randn(3, 50)
    assert top_p_filter(logits, torch.ones(3)) is logits
    kept = torch.isfinite(top_p_filter(logits, torch.tensor([1.0, 1.0, 0.5]))).sum(-1)
    assert kept[:2].tolist() == [50, 50] and 0 < int(kept[2]) < 50


def test_bf16_copy_follows_weight_updates(tiny, tokenizer) -> None:
    model = copy.deepcopy(tiny)
    generator = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=3, temperature=0.0, stop=[])
    generator.generate([[1, 2, 3]], params)
    low = generator._compute_model()
    assert low is not model and next(low.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32  # the learner's weights untouched
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)  # an in-place update, as the optimiser does
    generator.generate([[1, 2, 3]], params)
    for p16, p32 in zip(low.parameters(), model.parameters(), strict=True):
        assert torch.equal(p16, p32.to(torch.bfloat16))


def test_bf16_copy_follows_an_optimizer_step_of_the_project(tiny, tokenizer) -> None:
    """The generator notices new weights by the parameters' in-place version counters; the
    fused AdamW kernel does not bump them by itself (learner.adamw does): after a step the bf16
    copy must hold the new weights, and its samples must follow them."""
    from agentic_rl.learner.update import adamw

    model = copy.deepcopy(tiny)
    generator = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=3, temperature=0.0, stop=[])
    generator.generate([[1, 2, 3]], params)
    optimizer = adamw(list(model.parameters()), lr=0.5)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    generator.generate([[1, 2, 3]], params)
    low = generator._compute_model()
    for p16, p32 in zip(low.parameters(), model.parameters(), strict=True):
        assert torch.equal(p16, p32.to(torch.bfloat16))


def test_update_weights_refreshes_the_bf16_copy_without_a_version_change(tiny, tokenizer):
    """The trainer's explicit sync (`update_weights(None)`) re-casts the copy even when the
    weights changed without touching the version counters (a write through `.data`)."""
    model = copy.deepcopy(tiny)
    generator = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=2, temperature=0.0, stop=[])
    generator.generate([[1, 2, 3]], params)
    for p in model.parameters():
        p.data.add_(0.25)  # no version bump
    generator.update_weights(None)
    generator.generate([[1, 2, 3]], params)
    for p16, p32 in zip(generator._compute_model().parameters(), model.parameters(), strict=True):
        assert torch.equal(p16, p32.to(torch.bfloat16))

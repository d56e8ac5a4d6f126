"""HFGenerator sampling internals: inverse-CDF sampling, top-p shortcut, the bf16 weight copy."""

from __future__ import annotations

import copy

import torch

from agentic_rl.backends.hf import HFGenerator, _sample, _top_p_filter
from agentic_rl.types import SamplingParams


def test_inverse_cdf_sampling_matches_the_probabilities() -> None:
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3]]).expand(20_000, -1)
    gen = torch.Generator().manual_seed(0)
    counts = torch.bincount(_sample(probs, gen), minlength=4).double() / 20_000
    assert counts[1] == 0  # a zero-probability token (outside top-p) is never drawn
    torch.testing.assert_close(
        counts, torch.tensor([0.1, 0.0, 0.6, 0.3]).double(), atol=0.012, rtol=0
    )


def test_sampling_is_reproducible_from_the_seed() -> None:
    probs = torch.softmax(torch.randn(16, 1000, generator=torch.Generator().manual_seed(1)), -1)
    a = _sample(probs, torch.Generator().manual_seed(7))
    b = _sample(probs, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.shape == (16,)


def test_top_p_of_one_masks_nothing_and_skips_the_sort() -> None:
    logits = torch.randn(3, 50)
    assert _top_p_filter(logits, torch.ones(3)) is logits
    kept = torch.isfinite(_top_p_filter(logits, torch.tensor([1.0, 1.0, 0.5]))).sum(-1)
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

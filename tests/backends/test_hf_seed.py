"""A request without a seed must not touch the global torch RNG (issue 21)."""

from __future__ import annotations

import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.types import SamplingParams


def test_unseeded_sampling_leaves_the_global_rng_alone(tiny, tokenizer) -> None:
    generator = HFGenerator(tiny, tokenizer, max_batch_size=4)
    params = SamplingParams(max_new_tokens=3, temperature=1.0, stop=[])
    torch.manual_seed(1234)
    state, initial = torch.random.get_rng_state(), torch.initial_seed()
    generator.generate([[1, 2, 3], [4, 5]], params)  # no seed: a fresh one of its own
    assert torch.initial_seed() == initial == 1234
    assert torch.equal(torch.random.get_rng_state(), state)
    # A seed still reproduces.
    seeded = SamplingParams(max_new_tokens=8, temperature=1.0, stop=[], seed=7)
    first = generator.generate([[1, 2, 3]], seeded)[0].token_ids
    assert generator.generate([[1, 2, 3]], seeded)[0].token_ids == first

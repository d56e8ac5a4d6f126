"""oneDNN-packed bf16 linear layers of the generator's bf16 copy: same numbers, re-packed on
every weight change, tied weights kept tied."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.packed_linear import PackedLinear, pack_linears, packing_available
from agentic_rl.types import SamplingParams

pytestmark = pytest.mark.skipif(
    not packing_available(), reason="this PyTorch build has no oneDNN bf16 linear"
)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 24), (5, 1, 24), (3, 7, 24)])
def test_packed_linear_equals_linear(bias: bool, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(24, 40, bias=bias).to(torch.bfloat16)
    packed = PackedLinear(linear, batch_hint=4)
    x = torch.randn(shape, dtype=torch.bfloat16)
    out = packed(x)
    assert out.shape == (*shape[:-1], 40)
    torch.testing.assert_close(out, linear(x), atol=0, rtol=0)
    # float32 input (not the packed dtype) falls back to F.linear on the same weight
    assert torch.equal(packed(x.float().to(torch.bfloat16)), out)


def test_repack_follows_a_weight_change() -> None:
    linear = nn.Linear(16, 8, bias=False).to(torch.bfloat16)
    packed = PackedLinear(linear, batch_hint=2)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    before = packed(x)
    with torch.no_grad():
        packed.weight.mul_(2)
    assert torch.equal(packed(x), before)  # the packed copy is stale until repacked
    packed.repack()
    torch.testing.assert_close(packed(x), (before.float() * 2).to(torch.bfloat16))


def test_pack_linears_replaces_plain_bf16_layers_and_keeps_ties(tiny) -> None:
    model = copy.deepcopy(tiny).to(torch.bfloat16)
    model.tie_weights()
    names = [name for name, _ in model.named_parameters()]
    layers = pack_linears(model, batch_hint=4)
    assert layers and all(isinstance(layer, PackedLinear) for layer in layers)
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert [name for name, _ in model.named_parameters()] == names  # same order for copying
    if tiny.config.tie_word_embeddings:
        assert model.lm_head.weight is model.get_input_embeddings().weight
    # a float32 model is left alone
    assert pack_linears(copy.deepcopy(tiny), batch_hint=4) == []


def test_generator_gives_the_same_tokens_and_logprobs_packed_or_not(tiny, tokenizer) -> None:
    """Packed vs plain bf16 copies, before and after an in-place weight update (which must
    trigger a re-pack): identical sampled tokens and behaviour logprobs."""
    model = copy.deepcopy(tiny)
    packed = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    plain = HFGenerator(
        model, tokenizer, max_batch_size=4, mixed_precision="bf16", packed_weights=False
    )
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop=[], seed=3)
    prompts = [[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7]]
    for _ in range(2):
        a, b = packed.generate(prompts, params), plain.generate(prompts, params)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.logprobs for c in a] == [c.logprobs for c in b]
        assert any(isinstance(m, PackedLinear) for m in packed._compute_model().modules())
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))  # as an optimiser step would

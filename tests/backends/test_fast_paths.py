"""The generator's bf16 fast paths choose themselves per machine: prepacked linears or not,
matmul attention or SDPA, by a one-time measurement (`backends/fast_paths.py`). The
choice logic is tested on fake timings; the chosen path must compute what the default does
(bit-equal without packing, bfloat16 rounding for the other attention)."""

from __future__ import annotations

import copy

import pytest
import torch

from agentic_rl.backends import fast_paths
from agentic_rl.backends.fast_paths import choose_fast_path
from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.packed_linear import PackedLinear, native_bf16, packing_available
from agentic_rl.model.attention import NAME, use_fast_cpu_attention
from agentic_rl.types import SamplingParams

PACKED_MATMUL, PLAIN_MATMUL = (True, NAME), (False, NAME)
PACKED_SDPA, PLAIN_SDPA = (True, "sdpa"), (False, "sdpa")


def test_choose_fast_path_keeps_the_default_unless_clearly_faster() -> None:
    near = {PACKED_MATMUL: 1.0, PLAIN_MATMUL: 0.96, PACKED_SDPA: 0.99, PLAIN_SDPA: 1.2}
    assert choose_fast_path(near, PACKED_MATMUL) == PACKED_MATMUL  # 4% < the 5% margin
    clear = {PACKED_MATMUL: 1.0, PLAIN_MATMUL: 0.94, PACKED_SDPA: 0.80, PLAIN_SDPA: 1.2}
    assert choose_fast_path(clear, PACKED_MATMUL) == PACKED_SDPA  # the fastest, 20% faster
    assert choose_fast_path(clear, PACKED_MATMUL, margin=0.25) == PACKED_MATMUL
    with pytest.raises(ValueError, match="not measured"):
        choose_fast_path({PLAIN_SDPA: 1.0}, PACKED_MATMUL)


def test_native_bf16_reads_the_cpu_flags() -> None:
    assert native_bf16({"avx2", "avx512f", "avx512_bf16"})
    assert native_bf16({"amx_bf16", "amx_tile"})
    assert not native_bf16({"avx2", "avx512f", "avx512_vnni"})


def fake_timer(fastest: tuple[bool, str], calls: list[tuple[bool, str]]):
    """A `_time_step` that reads the copy's current configuration and reports `fastest` at
    half the time of every other configuration."""

    def time_step(self, model, rows, clock=None) -> float:
        packed = any(isinstance(m, PackedLinear) and m.packed is not None for m in model.modules())
        current = (packed, model.config._attn_implementation)
        calls.append(current)
        return 0.5 if current == fastest else 1.0

    return time_step


@pytest.mark.skipif(not packing_available(), reason="needs oneDNN bf16")
@pytest.mark.parametrize("fastest", [PLAIN_SDPA, PACKED_MATMUL, PLAIN_MATMUL])
def test_generator_takes_the_measured_fastest_path(tiny, tokenizer, monkeypatch, fastest) -> None:
    monkeypatch.setattr(fast_paths, "MEASURE_MIN_PARAMS", 0)
    calls: list[tuple[bool, str]] = []
    monkeypatch.setattr(HFGenerator, "_time_step", fake_timer(fastest, calls))
    model = copy.deepcopy(tiny)
    use_fast_cpu_attention(model)
    chosen = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    compute = chosen._compute_model()
    # every candidate timed: one warm-up round + MEASURE_REPEATS rounds
    assert sorted(set(calls)) == sorted([PACKED_MATMUL, PLAIN_MATMUL, PACKED_SDPA, PLAIN_SDPA])
    assert len(calls) == 4 * (fast_paths.MEASURE_REPEATS + 1)
    record = chosen.fast_paths
    assert record is not None and record["chosen_by"] == "measurement"
    assert (record["packed_weights"], record["attention"]) == fastest
    assert compute.config._attn_implementation == fastest[1]
    assert model.config._attn_implementation == NAME  # the learner's model is left alone
    assert bool(chosen._packed) == fastest[0]
    packed_now = [m.packed is not None for m in compute.modules() if isinstance(m, PackedLinear)]
    assert packed_now and all(p == fastest[0] for p in packed_now)

    # The same outputs as a generator forced onto that path ...
    forced = HFGenerator(
        model,
        tokenizer,
        max_batch_size=4,
        mixed_precision="bf16",
        packed_weights=fastest[0],
        choose_fast_paths=False,
    )
    forced._compute_model().config._attn_implementation = fastest[1]
    params = SamplingParams(max_new_tokens=5, temperature=1.0, stop=[], seed=7)
    prompts = [[1, 2, 3, 4], [1, 2, 3, 4], [5, 6, 7]]
    for _ in range(2):  # before and after a weight update (re-cast, re-pack if packed)
        a, b = chosen.generate(prompts, params), forced.generate(prompts, params)
        assert [c.token_ids for c in a] == [c.token_ids for c in b]
        assert [c.logprobs for c in a] == [c.logprobs for c in b]
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        assert chosen._compute_model() is compute
    # ... and the default path's numbers up to bfloat16 rounding.
    default = HFGenerator(
        model, tokenizer, max_batch_size=4, mixed_precision="bf16", choose_fast_paths=False
    )
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        got = compute(input_ids=ids).logits.float()
        want = default._compute_model()(input_ids=ids).logits.float()
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def test_a_small_model_keeps_the_defaults_without_measuring(tiny, tokenizer, monkeypatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("measured a model under MEASURE_MIN_PARAMS")

    monkeypatch.setattr(HFGenerator, "_time_step", never)
    model = copy.deepcopy(tiny)
    use_fast_cpu_attention(model)
    generator = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    compute = generator._compute_model()
    record = generator.fast_paths
    assert record is not None and record["chosen_by"].startswith("default (model under")
    assert (record["packed_weights"], record["attention"]) == (packing_available(), NAME)
    assert compute.config._attn_implementation == NAME
    # float32 generation has no copy and nothing to choose
    fp32 = HFGenerator(model, tokenizer, max_batch_size=4)
    fp32.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, stop=[], seed=0))
    assert fp32.fast_paths is None


@pytest.mark.parametrize("attention", [NAME, "sdpa"])
def test_time_step_runs_a_decoding_forward(tiny, tokenizer, attention) -> None:
    """The measurement's synthetic decoding step runs on the real bf16 copy (random KV cache,
    a padding mask) with either attention, and reports a positive time."""
    model = copy.deepcopy(tiny)
    use_fast_cpu_attention(model)
    generator = HFGenerator(
        model, tokenizer, max_batch_size=4, mixed_precision="bf16", choose_fast_paths=False
    )
    compute = generator._compute_model()
    compute.config._attn_implementation = attention
    ticks = iter([10.0, 10.25])
    assert generator._time_step(compute, rows=3, clock=lambda: next(ticks)) == 0.25


def test_a_failed_measurement_keeps_the_defaults(tiny, tokenizer, monkeypatch) -> None:
    """A model the synthetic decoding step does not fit: a logged default, never a crash."""

    def broken(*args, **kwargs):
        raise RuntimeError("no KV cache here")

    monkeypatch.setattr(fast_paths, "MEASURE_MIN_PARAMS", 0)
    monkeypatch.setattr(HFGenerator, "_time_step", broken)
    model = copy.deepcopy(tiny)
    use_fast_cpu_attention(model)
    generator = HFGenerator(model, tokenizer, max_batch_size=4, mixed_precision="bf16")
    out = generator.generate([[1, 2, 3]], SamplingParams(max_new_tokens=3, stop=[], seed=0))
    assert len(out[0].token_ids) == 3
    record = generator.fast_paths
    assert record is not None and record["chosen_by"].startswith("default (measurement failed")
    compute = generator._compute_model()
    assert compute.config._attn_implementation == NAME
    packed_now = [m.packed is not None for m in compute.modules() if isinstance(m, PackedLinear)]
    assert all(packed_now) and len(packed_now) == len(generator._packed)

"""The compiled decoding step (backends/compiled.py; whether it is used: fast_paths.py's
`choose_compiled_decode`): the generator decodes through one compiled
Llama decoder layer over a preallocated KV cache and must give what the model's forward gives:
same greedy tokens, logprobs within the generator tests' tolerance, stop strings, per-row
budgets, rows leaving the batch, the KV kept for a next turn. The semantics are tested with
`layer_step` run eagerly (no compiler: fast); one test compiles it with inductor. Where
compiling fails, or the step disagrees with the forward, the generator keeps the forward and
says so once."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from torch import nn

from agentic_rl.backends import compiled, fast_paths
from agentic_rl.backends.compiled import (
    StaticKV,
    layer_step,
    rms_norm,
    rotate,
    unsupported_reason,
)
from agentic_rl.backends.fast_paths import choose_compiled_decode
from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.packed_linear import packing_available
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.model.load import token_logprobs
from agentic_rl.types import SamplingParams


def prompts(tokenizer):
    texts = ["Hello there", "What is the capital of", "A", "Once upon a time, in a land"]
    return [tokenizer(t)["input_ids"] for t in texts]  # different lengths: left padding


@pytest.fixture
def eager_step(monkeypatch):
    """`layer_step` uncompiled: the compiled path's semantics without paying for a compiler."""
    monkeypatch.setattr(compiled, "compiled_layer_step", lambda: layer_step)


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(compiled, "_warned", set())


def pair(tiny, tokenizer, **kwargs):
    """Today's generator and the compiled one over the same model."""
    today = HFGenerator(tiny, tokenizer, compiled_decode="never", **kwargs)
    fast = HFGenerator(tiny, tokenizer, compiled_decode="always", **kwargs)
    return today, fast


def assert_same(a, b, atol=1e-4):
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert x.finish_reason == y.finish_reason
        torch.testing.assert_close(
            torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=atol, rtol=0
        )


def test_rms_norm_and_rotary_by_hand():
    x = torch.tensor([[3.0, 4.0]])  # mean square 12.5
    expected = torch.tensor([[3.0, 4.0]]) / 12.5**0.5 * torch.tensor([1.0, 2.0])
    torch.testing.assert_close(rms_norm(x, torch.tensor([1.0, 2.0]), 0.0), expected)
    q = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)  # halves (1, 2), (3, 4)
    cos, sin = torch.zeros(1, 1, 4), torch.ones(1, 1, 4)  # a quarter turn: x -> rotate_half(x)
    assert rotate(q, cos, sin).flatten().tolist() == [-3.0, -4.0, 1.0, 2.0]


def test_greedy_tokens_and_logprobs_match_todays_path(tiny, tokenizer, eager_step):
    today, fast = pair(tiny, tokenizer)
    params = [SamplingParams(max_new_tokens=b, temperature=0.0) for b in (1, 9, 4, 12)]
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    assert_same(a, b)
    assert [len(c.token_ids) for c in b] == [1, 9, 4, 12]  # per-row budgets; rows leave
    assert fast.compiled_decode["used"] and not today.compiled_decode


def test_sampled_tokens_match_and_logprobs_are_the_learners(tiny, tokenizer, eager_step):
    today, fast = pair(tiny, tokenizer)
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_p=0.9, seed=5)
    ps = prompts(tokenizer)
    a, b = today.generate(ps, params), fast.generate(ps, params)
    assert_same(a, b)
    plain = SamplingParams(max_new_tokens=8, seed=3)
    for p, c in zip(ps, fast.generate(ps, plain), strict=True):
        ids = torch.tensor([p + c.token_ids])
        lp, _, _ = token_logprobs(tiny, ids, torch.ones_like(ids))
        torch.testing.assert_close(lp[0, len(p) :], torch.tensor(c.logprobs), atol=1e-4, rtol=0)


def test_stop_strings_and_eos(tiny, tokenizer, eager_step):
    today, fast = pair(tiny, tokenizer)
    free = today.generate(prompts(tokenizer)[:1], SamplingParams(max_new_tokens=12, temperature=0))
    stop = tokenizer.decode(free[0].token_ids[:5])[-2:]
    params = SamplingParams(max_new_tokens=12, temperature=0, stop=[stop])
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    assert_same(a, b)
    assert b[0].finish_reason == "stop" and len(b[0].token_ids) <= 5
    end = free[0].token_ids[2]
    eos = HFGenerator(tiny, tokenizer, eos_token_ids=[end])
    eos_fast = HFGenerator(tiny, tokenizer, eos_token_ids=[end], compiled_decode="always")
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    c, d = eos.generate(prompts(tokenizer), greedy), eos_fast.generate(prompts(tokenizer), greedy)
    assert_same(c, d)
    assert d[0].finish_reason == "eos"
    assert len(d[0].token_ids) == free[0].token_ids.index(end) + 1


def test_next_turn_reuses_the_kv_the_compiled_step_wrote(tiny, tokenizer, eager_step):
    """Prefix sharing: turn 2 prefills only its new tokens over the KV kept from turn 1's
    static cache, and equals a generator that recomputes everything."""
    _, fast = pair(tiny, tokenizer)
    plain = HFGenerator(tiny, tokenizer, prefix_cache=False)
    ps = prompts(tokenizer)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    first = fast.generate(ps, greedy)
    observation = tokenizer("\n<information>42</information>\n")["input_ids"]
    turn2 = [p + c.token_ids + observation for p, c in zip(ps, first, strict=True)]
    second = fast.generate(turn2, greedy)
    kept = [len(p) + len(c.token_ids) - 1 for p, c in zip(ps, first, strict=True)]
    assert fast.reused_tokens == sum(kept)
    assert_same(second, plain.generate(turn2, greedy))


def test_group_rows_share_one_prefill(tiny, tokenizer, eager_step):
    today, fast = pair(tiny, tokenizer)
    p = prompts(tokenizer)[1]
    params = SamplingParams(max_new_tokens=5, seed=0)
    a, b = today.generate([p] * 6, params), fast.generate([p] * 6, params)
    assert fast.prompt_tokens == len(p)
    assert_same(a, b)


def test_bf16_copy_agrees_within_bfloat16_rounding(tiny, tokenizer, eager_step):
    today, fast = pair(copy.deepcopy(tiny), tokenizer, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=6, temperature=0)
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    assert fast.compiled_decode["used"]
    assert fast.compiled_decode["max_logprob_diff"] < 0.05
    first = [(x.token_ids[0], y.token_ids[0]) for x, y in zip(a, b, strict=True)]
    assert all(x == y for x, y in first)  # the prefill is shared; later steps may round apart
    for x, y in zip(a, b, strict=True):
        assert abs(x.logprobs[0] - y.logprobs[0]) < 1e-6


def test_weight_updates_are_seen_without_rebuilding(tiny, tokenizer, eager_step):
    today, fast = pair(tiny, tokenizer)
    params = SamplingParams(max_new_tokens=6, temperature=0)
    fast.generate(prompts(tokenizer), params)
    decoder = fast._decoder
    with torch.no_grad():  # an optimiser step, in place
        for p in tiny.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert_same(
        today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    )
    assert fast._decoder is decoder


def failing_compile():
    def fail(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")

    return fail


def test_compile_failure_falls_back_and_warns_once(tiny, tokenizer, monkeypatch, caplog):
    monkeypatch.setattr(compiled, "compiled_layer_step", failing_compile)
    today, fast = pair(tiny, tokenizer)
    other = HFGenerator(tiny, tokenizer, compiled_decode="always")
    params = SamplingParams(max_new_tokens=5, temperature=0)
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        outs = [g.generate(prompts(tokenizer), params) for g in (fast, fast, other)]
    warnings = [r for r in caplog.records if "compiled decoding step unavailable" in r.message]
    assert len(warnings) == 1  # once per process, not per call or generator
    assert "no working C++ compiler" in warnings[0].message
    assert fast.compiled_decode["used"] is False
    assert fast.compiled_decode["chosen_by"].startswith("failed: RuntimeError")
    for out in outs:
        assert_same(today.generate(prompts(tokenizer), params), out, atol=0)


def test_a_failure_mid_call_finishes_on_the_forward(tiny, tokenizer, monkeypatch, caplog):
    """Compiling worked, then a later step fails (e.g. a recompile for a new shape): the call
    goes on from the static cache's filled columns on the model's forward."""
    calls = [0]

    def flaky(*args, **kwargs):
        calls[0] += 1
        if calls[0] > 2 * 2 + 3:  # the measurement's 2 steps (2 layers each), then 1.5 steps
            raise RuntimeError("recompile failed")
        return layer_step(*args, **kwargs)

    monkeypatch.setattr(compiled, "compiled_layer_step", lambda: flaky)
    today, fast = pair(tiny, tokenizer)
    params = SamplingParams(max_new_tokens=7, temperature=0)
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        b = fast.generate(prompts(tokenizer), params)
    assert_same(today.generate(prompts(tokenizer), params), b)
    assert fast._decoder.broken and fast._static_decoder() is None
    assert sum("recompile failed" in r.message for r in caplog.records) == 1


def test_a_step_that_disagrees_with_the_forward_is_refused(tiny, tokenizer, monkeypatch, caplog):
    def wrong(h, w, *rest):  # e.g. an architecture detail the compiled layer does not know
        return layer_step(h, (w[0] * 2, *w[1:]), *rest)

    monkeypatch.setattr(compiled, "compiled_layer_step", lambda: wrong)
    fast = HFGenerator(tiny, tokenizer, compiled_decode="always")
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        fast.generate(prompts(tokenizer), SamplingParams(max_new_tokens=3, temperature=0))
    assert not fast.compiled_decode["used"]
    assert "disagrees with the model's forward" in fast.compiled_decode["chosen_by"]
    assert any("disagrees" in r.message for r in caplog.records)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("compiled_s", "used"), [(0.5, True), (0.97, False), (2.0, False)])
def test_auto_keeps_the_faster_path(tiny, monkeypatch, compiled_s, used):
    """auto: times both on a synthetic step (fake clock: the forward takes 1 s) and keeps the
    compiled step only when it beats the forward by more than the 5% margin."""
    clock = FakeClock()

    def timed(*args, **kwargs):
        clock.now += compiled_s / tiny.config.num_hidden_layers
        return layer_step(*args, **kwargs)

    def reference(ids, attn, positions, cache):
        clock.now += 1.0
        return (
            tiny(
                input_ids=ids,
                attention_mask=attn,
                position_ids=positions,
                cache=cache,
                use_cache=True,
            )
            .logits[:, -1]
            .float()
        )

    monkeypatch.setattr(compiled, "compiled_layer_step", lambda: timed)
    monkeypatch.setattr(fast_paths, "MEASURE_MIN_PARAMS", 0)
    decoder, record = choose_compiled_decode(tiny.eval(), "auto", 4, reference, clock)
    assert record["chosen_by"] == "measurement" and record["used"] is used
    assert (decoder is not None) is used
    assert record["step_ms"] == pytest.approx({"compiled": 1000 * compiled_s, "model_forward": 1e3})


def test_auto_keeps_the_forward_for_small_models(tiny, tokenizer):
    gen = HFGenerator(tiny, tokenizer, compiled_decode="auto")
    gen.generate(prompts(tokenizer)[:1], SamplingParams(max_new_tokens=2, temperature=0))
    assert gen.compiled_decode["used"] is False
    assert gen.compiled_decode["chosen_by"].startswith("default (model under")


def test_unsupported_models_keep_the_forward(tiny):
    assert unsupported_reason(tiny) is None
    adapted = copy.deepcopy(tiny)

    class Adapter(nn.Module):  # stands for a LoRA layer wrapping the projection
        def __init__(self, base: nn.Linear) -> None:
            super().__init__()
            self.base, self.weight, self.bias = base, base.weight, base.bias

        def forward(self, x):
            return self.base(x)

    attn = adapted.model.layers[1].self_attn
    attn.q_proj = Adapter(attn.q_proj)
    assert unsupported_reason(adapted) == "projection layers of type Adapter"
    other = copy.deepcopy(tiny)
    other.config.model_type = "gemma"
    assert "model type 'gemma'" in unsupported_reason(other)


def test_static_kv_keeps_rows_and_hands_back_a_dynamic_cache():
    from transformers import DynamicCache

    cache = DynamicCache()
    k = torch.arange(3 * 2 * 5 * 4, dtype=torch.float32).view(3, 2, 5, 4)
    cache.update(k, -k, 0)
    static = StaticKV.adopt(cache, 3)
    assert static.keys[0].shape == (3, 2, compiled.CACHE_BLOCK, 4) and static.length == 5
    static.batch_select_indices(torch.tensor([0, 2]))
    torch.testing.assert_close(static.layers[0].keys, k[[0, 2]])
    back = static.to_dynamic()
    torch.testing.assert_close(back.layers[0].values, -k[[0, 2]])


def test_the_knob_is_validated(tiny, tokenizer):
    assert load_config(None, ["rollout.compiled_decode=never"]).rollout.compiled_decode == "never"
    with pytest.raises(ConfigError, match="rollout.compiled_decode: 'fast' is not one of"):
        load_config(None, ["rollout.compiled_decode=fast"])
    with pytest.raises(ConfigError, match="rollout.compiled_decode: 'no' is not one of"):
        load_config(None, ["rollout.compiled_decode=off"])  # YAML reads off as false
    with pytest.raises(ConfigError, match="rollout.compiled_decode is set but does nothing"):
        load_config(None, ["rollout.backend=vllm", "rollout.compiled_decode=always"])
    with pytest.raises(ValueError, match="compiled_decode: 'yes' is not one of"):
        HFGenerator(tiny, tokenizer, compiled_decode="yes")


@pytest.mark.slow  # ~24 s with a cold compile cache on the loaded 2-core machine
def test_inductor_compiles_it_once_for_every_layer_and_batch(tiny, tokenizer):
    """The real compiler: same greedy tokens as the forward, one graph reused by every layer
    and every batch size above one (rows leave the batch) and cache length; a single row is
    the one shape dynamo specialises."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled._compiled_layer_step = None
    today, fast = pair(tiny, tokenizer)
    params = [SamplingParams(max_new_tokens=b, temperature=0.0) for b in (2, 9, 5, 12)]
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    assert_same(a, b)
    record = fast.compiled_decode
    assert record["used"] and record["compile_s"] > 0
    assert record["max_logprob_diff"] < 1e-4
    assert counters["stats"]["unique_graphs"] <= 2


def test_sampled_logprob_error_by_hand():
    """E_{v ~ p_exact} |log p(v) - log p_exact(v)|, the largest over rows: exact (1/2, 1/2) vs
    (3/4, 1/4) gives (ln 1.5 + ln 2) / 2; an identical row gives 0."""
    exact = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    other = torch.tensor([[float(torch.log(torch.tensor(3.0))), 0.0], [1.0, 2.0]])
    expected = (torch.log(torch.tensor(1.5)) + torch.log(torch.tensor(2.0))).item() / 2
    assert fast_paths.sampled_logprob_error(exact, other) == pytest.approx(expected, abs=1e-6)
    assert fast_paths.sampled_logprob_error(exact[1:], other[1:]) == 0.0


def test_the_check_runs_on_the_models_own_kv(tiny):
    """The probe's context is the model's own prefill: its KV is what the forward computes for
    the prompt (not random keys and values), left padding in every other row."""
    probe = fast_paths.Probe.make(tiny.config.vocab_size, rows=4, context=12)
    assert probe.prompt_attn[::2, 0].eq(0).all() and probe.prompt_attn[1::2].eq(1).all()
    assert probe.positions.flatten().tolist() == [11, 12, 11, 12]  # real tokens before it

    calls = []

    def forward(ids, attn, positions, cache):
        calls.append(ids.shape)
        out = tiny(input_ids=ids, attention_mask=attn, position_ids=positions, cache=cache)
        return out.logits[:, -1].float()

    kv = probe.own_kv(forward)
    assert calls == [(4, 12)] and len(kv) == tiny.config.num_hidden_layers
    assert kv[0][0].shape[2] == 12 and kv[0][0].abs().sum() > 0


def test_a_bf16_copy_is_checked_against_the_float32_policy(tiny, tokenizer, eager_step):
    """With mixed_precision=bf16 both paths are measured against the float32 policy: the
    forward's own bf16 error is nonzero and the compiled step (here `layer_step` run eagerly,
    the same arithmetic) is within the allowance of it, so it is used."""
    gen = HFGenerator(tiny, tokenizer, compiled_decode="always", mixed_precision="bf16")
    gen.generate(prompts(tokenizer)[:2], SamplingParams(max_new_tokens=2, temperature=0))
    record = gen.compiled_decode
    assert record["used"], record
    errors = record["sampled_error"]
    assert errors["forward"] > 0  # bf16 vs the float32 policy: the exact model is the policy
    assert errors["compiled"] <= fast_paths.AGREEMENT_FACTOR * errors["forward"] + 0.15


needs_packing = pytest.mark.skipif(
    not packing_available(), reason="oneDNN bf16 weight packing is not available here"
)


@needs_packing
def test_packed_weights_reach_the_compiled_layer_and_follow_updates(tiny, tokenizer, eager_step):
    """In a bf16 copy with oneDNN-packed linears the compiled layer multiplies by the packed
    weights (not the plain bf16 ones, which oneDNN would re-lay-out on every call); a weight
    update re-packs them and the next step reads the new packed tensors."""
    today, fast = pair(copy.deepcopy(tiny), tokenizer, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=6, temperature=0)
    fast.generate(prompts(tokenizer), params)
    assert fast.fast_paths["packed_weights"] and fast.compiled_decode["used"]
    layer = fast._decoder._weights[0]
    projections = layer[1:9:2] + layer[10::2]  # q, k, v, o, gate, up, down
    assert len(projections) == 7 and all(w.is_mkldnn for w in projections)
    before = fast._decoder._weights[0][1]
    for model in (today.model, fast.model):  # the same in-place optimiser step on both
        torch.manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    assert fast._decoder._weights[0][1] is not before  # re-read after repack()
    first = [(x.token_ids[0], y.token_ids[0]) for x, y in zip(a, b, strict=True)]
    assert all(x == y for x, y in first)


@needs_packing
def test_inductor_compiles_the_packed_bf16_layer(tiny, tokenizer):
    """The real compiler on packed weights: the packed kernel is a custom operator inductor
    calls as it is (it cannot lower oneDNN's packed tensors at dynamic shapes); greedy tokens
    start as the forward's and logprobs agree within bfloat16 rounding."""
    torch._dynamo.reset()
    compiled._compiled_layer_step = None
    today, fast = pair(copy.deepcopy(tiny), tokenizer, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=5, temperature=0)
    a, b = today.generate(prompts(tokenizer), params), fast.generate(prompts(tokenizer), params)
    record = fast.compiled_decode
    assert record["used"] and fast.fast_paths["packed_weights"], record
    assert record["max_logprob_diff"] < 0.05
    assert all(x.token_ids[0] == y.token_ids[0] for x, y in zip(a, b, strict=True))

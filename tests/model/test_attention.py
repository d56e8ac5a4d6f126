"""bfloat16 CPU attention: the grouped matmul path against hand-computed and SDPA numbers, and
when it is used instead of SDPA."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.model import attention
from agentic_rl.model.attention import grouped_attention, packed_attention, use_fast_cpu_attention
from agentic_rl.model.load import load_policy, token_logprobs
from agentic_rl.model.packing import pack_rows


def _reference(q, k, v, mask):
    """repeat_kv + SDPA math in float64: the definition."""
    group = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(group, dim=1).double() for t in (k, v))
    scores = q.double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2)


def test_hand_computed_single_query() -> None:
    """One query head, keys [1, 0] and [0, 1] (D = 2, scale 1/sqrt 2), query [sqrt 2 * ln 3, 0]:
    scores [ln 3, 0] -> weights [3/4, 1/4] -> output 3/4 * v0 + 1/4 * v1."""
    q = torch.tensor([[[[math.sqrt(2) * math.log(3), 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    v = torch.tensor([[[[4.0, 8.0], [0.0, -8.0]]]])
    out = grouped_attention(q, k, v, None, scaling=1 / math.sqrt(2))
    torch.testing.assert_close(out, torch.tensor([[[[3.0, 4.0]]]]))
    # masking the first key leaves all the weight on the second
    mask = torch.tensor([False, True]).view(1, 1, 1, 2)
    out = grouped_attention(q, k, v, mask, scaling=1 / math.sqrt(2))
    torch.testing.assert_close(out, torch.tensor([[[[0.0, -8.0]]]]))


@pytest.mark.parametrize("q_len", [1, 3, 5])
def test_matches_repeated_kv_attention_with_groups_and_masks(q_len: int) -> None:
    g = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, keys, dim = 2, 6, 2, 5, 4
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    k = torch.randn(batch, kv_heads, keys, dim, generator=g)
    v = torch.randn(batch, kv_heads, keys, dim, generator=g)
    causal = torch.arange(q_len).unsqueeze(-1) + keys - q_len >= torch.arange(keys)
    padded = causal.expand(batch, 1, q_len, keys).clone()
    padded[0, :, :, 0] = False  # row 0 has a left pad at key 0
    for mask in (None, padded):
        expected = _reference(q, k, v, causal if mask is None else mask)
        got = grouped_attention(q, k, v, mask, scaling=dim**-0.5).double()
        defined = expected.isfinite()  # a query whose only key is the pad has no definition
        assert defined.float().mean() > 0.8
        torch.testing.assert_close(got[defined], expected[defined], atol=1e-5, rtol=1e-5)
        assert got.isfinite().all()


def test_a_query_with_nothing_to_attend_to_gives_numbers_not_nan() -> None:
    q, k, v = torch.randn(1, 2, 1, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    out = grouped_attention(q, k, v, torch.zeros(1, 1, 1, 3, dtype=torch.bool), scaling=0.5)
    assert torch.isfinite(out).all()


def _count_calls(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = attention.grouped_attention

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(attention, "grouped_attention", spy)
    return calls


def test_only_bf16_on_cpu_and_short_attention_take_the_matmul_path(tiny, monkeypatch) -> None:
    calls = _count_calls(monkeypatch)
    use_fast_cpu_attention(tiny)
    ids = torch.randint(0, 1000, (2, 7))
    with torch.no_grad():
        tiny(input_ids=ids)  # float32: SDPA
        assert calls == []
        with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: query arrives in float32
            tiny(input_ids=ids)
        assert len(calls) == tiny.config.num_hidden_layers
        low = copy.deepcopy(tiny).to(torch.bfloat16)  # bf16 weights (the generator's copy)
        low(input_ids=ids)
        assert len(calls) == 2 * tiny.config.num_hidden_layers
        monkeypatch.setattr(attention, "MAX_MATH_QUERY_KEYS", 6 * 6)  # 7 x 7 is now too long
        low(input_ids=ids)
        assert len(calls) == 2 * tiny.config.num_hidden_layers
        monkeypatch.setattr(attention, "MAX_MATH_QUERY_KEYS", 2**16)
        for layer in low.model.layers:  # a bidirectional layer is not this path's business
            layer.self_attn.is_causal = False
        low(input_ids=ids)
        assert len(calls) == 2 * tiny.config.num_hidden_layers


def test_bf16_logprobs_and_gradients_match_sdpa(tiny) -> None:
    """Same model under autocast with SDPA and with the matmul path: both are float32's numbers
    up to bfloat16 rounding, on right-padded rows as the learner sees them."""
    fast = copy.deepcopy(tiny)
    use_fast_cpu_attention(fast)
    ids = torch.randint(0, 1000, (3, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 9:] = 0
    results = []
    for model in (tiny, fast):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logprobs, _, _ = token_logprobs(model, ids, mask)
        logprobs.sum().backward()
        grad = model.model.layers[0].self_attn.q_proj.weight.grad
        results.append((logprobs.detach(), grad.clone()))
    (lp_sdpa, g_sdpa), (lp_fast, g_fast) = results
    assert fast.config._attn_implementation == attention.NAME
    torch.testing.assert_close(lp_fast, lp_sdpa, atol=0.05, rtol=0.01)
    assert float((g_fast - g_sdpa).norm() / g_sdpa.norm()) < 0.05


def test_config_switch_and_models_on_other_attention() -> None:
    on, _ = load_policy(load_config(None, ["model.name=tiny"]).model)
    off, _ = load_policy(
        load_config(None, ["model.name=tiny", "model.fast_cpu_attention=false"]).model
    )
    assert on.config._attn_implementation == attention.NAME
    assert off.config._attn_implementation == "sdpa"
    off.config._attn_implementation = "eager"
    use_fast_cpu_attention(off)  # not an SDPA model: left alone
    assert off.config._attn_implementation == "eager"


def test_a_model_pickled_into_a_fresh_process_still_generates(tmp_path) -> None:
    """A Ray actor unpickles the policy with the attention's name in its config but without
    the registration: the generator registers it there (real subprocess, no mocks)."""
    import subprocess
    import sys

    model, _ = load_policy(load_config(None, ["model.name=tiny"]).model)
    assert model.config._attn_implementation == attention.NAME
    torch.save(model, tmp_path / "model.pt")
    script = (
        "import torch\n"
        "from agentic_rl.backends.hf import HFGenerator\n"
        "from agentic_rl.config.rollout import ModelConfig\n"
        "from agentic_rl.model.load import load_tokenizer\n"
        "from agentic_rl.types import SamplingParams\n"
        f"model = torch.load({str(tmp_path / 'model.pt')!r}, weights_only=False)\n"
        "gen = HFGenerator(model, load_tokenizer(ModelConfig()), mixed_precision='bf16')\n"
        "out = gen.generate([[1, 2, 3]], SamplingParams(max_new_tokens=3, stop=[], seed=0))\n"
        "print(len(out[0].token_ids))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("3")


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_packed_attention_equals_the_block_masked_row(dtype) -> None:
    """Per segment (each prompt causal; each answer against its prompt + itself) == one
    attention over the whole packed row under the block mask, values and gradients."""
    # rows: two with a 5-token prompt (answers 3 and 1), two with a 2-token prompt (4 and 2)
    ids = torch.tensor(
        [[1, 2, 3, 4, 5, 6, 7, 8, 0], [1, 2, 3, 4, 5, 9, 0, 0, 0],
         [7, 7, 1, 2, 3, 4, 0, 0, 0], [7, 7, 5, 6, 0, 0, 0, 0, 0]]
    )  # fmt: skip
    attn = (ids > 0).long()
    wanted = attn.bool().clone()
    wanted[:2, :5], wanted[2:, :2] = False, False
    layout = pack_rows(ids, attn, wanted)
    assert layout is not None and layout.blocks == [(0, 2, 5), (2, 4, 2)]
    segments, mask = layout.segments, layout.block_mask()
    total = layout.tokens
    assert total == 5 + 3 + 1 + 2 + 4 + 2
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, total, 8, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(1, 2, total, 8, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(1, 2, total, 8, generator=g, dtype=torch.float64).to(dtype)
    outs, grads = [], []
    for fn in ("segments", "mask"):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        if fn == "segments":
            out = packed_attention(qq, kk, vv, segments, 0.3)
        else:
            out = grouped_attention(qq, kk, vv, mask, 0.3)
        assert out.shape == (1, total, 4, 8)
        (out.float() * torch.arange(out.numel()).view_as(out).sin()).sum().backward()
        outs.append(out.detach().float())
        grads.append([t.grad.float() for t in (qq, kk, vv)])
    tol = {"atol": 1e-10, "rtol": 1e-9} if dtype == torch.float64 else {"atol": 2e-2, "rtol": 2e-2}
    torch.testing.assert_close(outs[0], outs[1], **tol)
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, **tol)

"""bf16 on this CPU: speed of decoding and of a training pass, and the logprob error it costs.

Bundled SmolLM2-135M-Instruct, float32 weights. Measures, in one process:

- one decoding step (16 rows, ~90-token context with an attention mask, KV cache): float32; a
  bfloat16 copy of the parameters (what `rollout.mixed_precision=bf16` runs); float32 under
  torch.autocast(bf16), entered once around all steps or once per step;
- forward + backward of token logprobs over 8 x 150 tokens: float32 vs autocast(bf16) (what
  `learner.mixed_precision=bf16` runs);
- the logprob error against float32 on tokens the float32 model sampled itself (temperature 1,
  8 x 64 tokens): the bf16 copy and autocast.

The bf16 variants run twice: with PyTorch's fused SDPA kernel ("sdpa") and with this project's
matmul attention for short bfloat16 attention on CPU ("matmul", `model.fast_cpu_attention`,
src/agentic_rl/attention.py).

    .venv/bin/python bench/bf16_accuracy.py          # ~2 min on the 2-core CPU

Writes bench/results/bf16_accuracy.json.
"""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "bf16_accuracy.json"


def bf16_copy(model: torch.nn.Module) -> torch.nn.Module:
    """Parameters in bfloat16, buffers (rotary frequencies) left in float32, as HFGenerator."""
    low = copy.deepcopy(model).eval()
    for param in low.parameters():
        param.data = param.data.to(torch.bfloat16)
    return low


def decode_ms(
    model: torch.nn.Module, ctx: Callable[[], Any], steps: int = 20, per_step: bool = False
) -> float:
    """Milliseconds per decoding step; `ctx` entered once around all steps, or around each step
    (`per_step`, as a generator that wraps each forward does: autocast's weight-cast cache lives
    only as long as its context, so then every weight is re-cast at every step)."""
    from transformers import DynamicCache

    prompt = torch.randint(100, 20_000, (16, 90), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(prompt)
    mask[::2, :6] = 0  # rows of different lengths, left-padded as the generator batches them
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    token = torch.full((16, 1), 100)
    outer, inner = (contextlib.nullcontext, ctx) if per_step else (ctx, contextlib.nullcontext)

    def step(ids: torch.Tensor, pos: torch.Tensor) -> None:
        nonlocal mask
        if ids is token:
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        with inner():
            model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=pos,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )

    with torch.no_grad(), outer():
        cache = DynamicCache()
        step(prompt, positions)
        pos = positions[:, -1:]
        for _ in range(3):
            pos = pos + 1
            step(token, pos)
        t0 = time.perf_counter()
        for _ in range(steps):
            pos = pos + 1
            step(token, pos)
    return (time.perf_counter() - t0) / steps * 1000


@contextlib.contextmanager
def attention(model: torch.nn.Module, name: str) -> Any:
    """Run `model` on the attention implementation `name` ("sdpa" or "matmul") meanwhile."""
    from agentic_rl.model.attention import NAME, use_fast_cpu_attention

    before = model.config._attn_implementation
    model.config._attn_implementation = "sdpa"
    if name == "matmul":
        use_fast_cpu_attention(model)
        assert model.config._attn_implementation == NAME
    try:
        yield
    finally:
        model.config._attn_implementation = before


def train_pass_s(model: torch.nn.Module, ctx: Callable[[], Any]) -> float:
    from agentic_rl.model.load import token_logprobs

    ids = torch.randint(100, 20_000, (8, 150), generator=torch.Generator().manual_seed(1))
    model.train()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        with ctx():
            logprobs, _, _ = token_logprobs(model, ids, torch.ones_like(ids))
        logprobs.sum().backward()
        times.append(time.perf_counter() - t0)
    model.zero_grad(set_to_none=True)
    model.eval()
    return min(times)


def sampled_logprobs(model: torch.nn.Module, ids: torch.Tensor, start: int) -> torch.Tensor:
    """log p(x_t | x_<t) for t >= start, float32 head over whatever the backbone returns."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
    logprobs = torch.log_softmax(logits[:, :-1], dim=-1)
    return logprobs.gather(-1, ids[:, 1:, None]).squeeze(-1)[:, start - 1 :]


def error_stats(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    d = (a - b).abs().flatten()
    return {"mean": float(d.mean()), "p99": float(d.quantile(0.99)), "max": float(d.max())}


def main() -> None:
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    torch.manual_seed(0)
    model, tokenizer = load_policy(ModelConfig(dtype="float32"))
    model.eval()
    low = bf16_copy(model)
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    none = contextlib.nullcontext
    speed: dict[str, dict[str, float]] = {"decode_step_ms": {}, "train_pass_s": {}}
    with attention(model, "sdpa"):
        speed["decode_step_ms"]["float32"] = decode_ms(model, none)
        speed["train_pass_s"]["float32"] = train_pass_s(model, none)
    for attn in ("sdpa", "matmul"):
        with attention(model, attn), attention(low, attn):
            decode = speed["decode_step_ms"]
            decode[f"bf16_copy_{attn}"] = decode_ms(low, none)
            decode[f"float32_autocast_once_{attn}"] = decode_ms(model, autocast)
            decode[f"float32_autocast_per_step_{attn}"] = decode_ms(model, autocast, per_step=True)
            speed["train_pass_s"][f"autocast_{attn}"] = train_pass_s(model, autocast)
    prompt = encode_prompt(
        tokenizer, [{"role": "user", "content": "Where was Ada Lovelace born? Explain briefly."}]
    )
    with torch.no_grad():
        ids = model.generate(
            torch.tensor([prompt] * 8),
            attention_mask=torch.ones(8, len(prompt), dtype=torch.long),
            do_sample=True,
            max_new_tokens=64,
            min_new_tokens=64,
            temperature=1.0,
            top_k=0,
        )
    with attention(model, "sdpa"):
        reference = sampled_logprobs(model, ids, len(prompt))
    errors: dict[str, Any] = {"mean_sampled_logprob_float32": float(reference.mean())}
    for attn in ("sdpa", "matmul"):
        with attention(model, attn), attention(low, attn):
            errors[f"bf16_copy_{attn}"] = error_stats(
                sampled_logprobs(low, ids, len(prompt)), reference
            )
            with autocast():
                errors[f"autocast_{attn}"] = error_stats(
                    sampled_logprobs(model, ids, len(prompt)), reference
                )
    record = {
        "speed": speed,
        "logprob_abs_error_vs_float32": errors,
        "threads": torch.get_num_threads(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record, indent=2))
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()

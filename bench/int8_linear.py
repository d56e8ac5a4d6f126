"""Would int8 weights make decoding faster here? The bundled model's linear layers, timed per kernel.

A decoding step multiplies a few rows by every weight matrix of the model, so a rollout in int8
weights reads half the bytes of bf16. Whether that is faster depends on the CPU's int8 kernels,
so this measures, on the bundled model's own shapes (its attention and MLP projections and the
LM head, from its config) at the generator's row counts:

* `fp32`: `F.linear` in float32 (the policy's own precision);
* `bf16`: `F.linear` in bfloat16 (the rollout copy without prepacking);
* `bf16_packed`: oneDNN-prepacked bfloat16 (`backends/packed_linear.py`, the rollout copy's
  default fast path);
* `int8_weight_only`: int8 weights with a float scale per output channel, bfloat16 activations
  (`torch.ops.aten._weight_int8pack_mm`, the CPU kernel weight-only quantisation calls);
* `int8_dynamic`: int8 weights and activations quantised per call, float32 in and out
  (`torch.ao` dynamic quantisation on the machine's quantised engine; torch.ao's quantised
  tensors are deprecated, so a generator path would not build on them);
* `int8_int_mm`: the same arithmetic from core operators: each input row quantised to int8 with
  its own scale, `torch._int_mm` (int8 x int8 -> int32), rescaled by row and channel scales.

Each kernel runs `--repeats` interleaved rounds of `--calls` calls; the best round counts. Its
error is the relative Frobenius error of its output against float32's, the model's own weights
times random rows (a layer's error, not the logprob mismatch of a whole step). The step estimate sums
one layer's projections x the layer count, plus the LM head: the linear share of a decoding
step, not the whole step (attention, norms and the sampler are the same in every arm).

    .venv/bin/python bench/int8_linear.py                 # ~1-2 min at 2 threads
    .venv/bin/python bench/int8_linear.py --calls 3 --repeats 1 --rows 4   # smoke

Writes bench/results/int8_linear.json (with the CPU flags) and prints a table. Measure on an
idle machine: the kernels' times are what is compared.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "int8_linear.json"
KERNELS = ("fp32", "bf16", "bf16_packed", "int8_weight_only", "int8_dynamic", "int8_int_mm")


def model_shapes(model_name: str) -> tuple[dict[str, tuple[int, int]], int, nn.Module]:
    """The model's linear shapes {name: (out, in)} of one decoder layer plus `lm_head`, its layer
    count, and the model (float32, its own weights)."""
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy

    model, _ = load_policy(ModelConfig(name=model_name, dtype="float32"))
    config = model.config
    layer = model.model.layers[0]
    shapes = {
        name: tuple(module.weight.shape)
        for name, module in layer.named_modules()
        if isinstance(module, nn.Linear)
    }
    shapes["lm_head"] = tuple(model.lm_head.weight.shape)
    return shapes, config.num_hidden_layers, model


def weight_of(model: nn.Module, name: str) -> torch.Tensor:
    if name == "lm_head":
        return model.lm_head.weight.detach().float()
    return model.model.layers[0].get_submodule(name).weight.detach().float()


def kernels(weight: torch.Tensor) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Each kernel as a function of float32 input rows [R, in] -> output [R, out] (any dtype)."""
    from agentic_rl.backends.packed_linear import PackedLinear, packing_available

    bf16 = weight.bfloat16()
    scale = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)
    int8 = (weight / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    scale_bf16 = scale.bfloat16()
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    linear.weight.data.copy_(weight)
    with warnings.catch_warnings():  # torch.ao's deprecation notice
        warnings.simplefilter("ignore")
        dynamic = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(linear), {nn.Linear}, dtype=torch.qint8
        )
    int8_t = int8.t().contiguous()  # [in, out]: torch._int_mm's right operand

    def int_mm(x: torch.Tensor) -> torch.Tensor:
        row_scale = (x.abs().amax(dim=1, keepdim=True) / 127).clamp(min=1e-12)
        xq = (x / row_scale).round().clamp(-127, 127).to(torch.int8)
        return torch._int_mm(xq, int8_t).float() * row_scale * scale

    out: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "fp32": lambda x: F.linear(x, weight),
        "bf16": lambda x: F.linear(x.bfloat16(), bf16),
        "int8_weight_only": lambda x: torch.ops.aten._weight_int8pack_mm(
            x.bfloat16(), int8, scale_bf16
        ),
        "int8_dynamic": lambda x: dynamic(x),
        "int8_int_mm": int_mm,
    }
    if packing_available():
        packed_source = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        packed_source.weight.data.copy_(bf16.float())
        packed = PackedLinear(packed_source.bfloat16(), batch_hint=16)
        out["bf16_packed"] = lambda x: packed(x.bfloat16())
    return out


def measure(
    weight: torch.Tensor, rows: int, calls: int, repeats: int
) -> dict[str, dict[str, float]]:
    """Per kernel: the best round's microseconds a call and the relative error vs float32."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, weight.shape[1], generator=gen)
    fns = kernels(weight)
    results: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        exact = F.linear(x, weight)
        for name, fn in fns.items():
            try:
                got = fn(x).float()
            except Exception as err:  # a kernel this build lacks
                results[name] = {"error": f"unavailable: {err!r}"[:200]}
                continue
            rel = float((got - exact).norm() / exact.norm())
            results[name] = {"rel_error": rel, "us": float("inf")}
        live = [n for n in fns if "us" in results[n]]
        for _ in range(repeats):  # interleaved: a noisy second hurts every kernel alike
            for name in live:
                fn = fns[name]
                fn(x)  # warm
                start = time.perf_counter()
                for _ in range(calls):
                    fn(x)
                seconds = (time.perf_counter() - start) / calls
                results[name]["us"] = min(results[name]["us"], 1e6 * seconds)
    return results


def table(per_rows: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (rows, kernel): the linear share of a step, its ratio to the bf16 copy's
    default kernel (packed where packing runs), and the LM head's relative error."""
    out = []
    for rows, entry in per_rows.items():
        step = entry["step_linear_ms"]
        base = step.get("bf16_packed") or step["bf16"]
        for kernel, ms in step.items():
            out.append(
                {
                    "rows": int(rows),
                    "kernel": kernel,
                    "step_linear_ms": ms,
                    "vs_bf16_default": ms / base,
                    "lm_head_rel_error": entry["linears"]["lm_head"][kernel]["rel_error"],
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rows", type=int, nargs="*", default=[1, 8, 16])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from agentic_rl.backends.packed_linear import cpu_flags, native_bf16

    shapes, layers, model = model_shapes(args.model)
    per_rows: dict[str, Any] = {}
    for rows in args.rows:
        linears = {
            name: measure(weight_of(model, name), rows, args.calls, args.repeats) for name in shapes
        }
        step: dict[str, float] = {}
        for kernel in KERNELS:
            if all("us" in linears[name].get(kernel, {}) for name in shapes):
                layer_us = sum(linears[n][kernel]["us"] for n in shapes if n != "lm_head")
                step[kernel] = (layers * layer_us + linears["lm_head"][kernel]["us"]) / 1000
        per_rows[str(rows)] = {"linears": linears, "step_linear_ms": step}
        print(f"\nrows {rows}: the linear share of a decoding step (ms)")
        print("| kernel | ms | x bf16_packed | rel. error (lm_head) |")
        print("|---|---|---|---|")
        base = step.get("bf16_packed") or step.get("bf16")
        for kernel, ms in step.items():
            err = linears["lm_head"][kernel]["rel_error"]
            print(f"| {kernel} | {ms:.2f} | {ms / base:.2f} | {err:.2e} |")
    result = {
        "model": args.model,
        "shapes": {name: list(shape) for name, shape in shapes.items()},
        "layers": layers,
        "threads": args.threads,
        "calls": args.calls,
        "repeats": args.repeats,
        "quantized_engine": torch.backends.quantized.engine,
        "rows": per_rows,
        "table": table(per_rows),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "native_bf16": native_bf16(),
            "flags": sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "vnni"))),
            "torch": torch.__version__,
            "python": sys.version.split()[0],
        },
        "command": " ".join([".venv/bin/python", "bench/int8_linear.py", *sys.argv[1:]]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

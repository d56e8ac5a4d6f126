"""How far a decoding step is from this CPU's limits: memory bandwidth and peak GEMM rate.

Three measurements in one run, on the same machine and thread count:

1. **Memory bandwidth**, STREAM-style on float32 arrays far larger than the caches (`--mib`
   each): copy `a = b` (2 arrays of traffic) and triad `a = b + s * c` (3 arrays), the best of
   `--repeats`, in GB/s (10^9 bytes).
2. **Peak GEMM rate**: square `torch.mm` at `--gemm-n` in float32 and bfloat16, the best of
   `--repeats`, in GFLOP/s (2 n^3 per product); and the decode-shaped GEMM the bundled model runs
   most, `[rows, 576] x [576, 1536]` (its MLP up-projection).
3. **A decoding step of the generator** (`HFGenerator`, bundled SmolLM2-135M, 16 rows, EOS off,
   the timing of `bench/profile_rollout.py`) in bf16 (the fast paths chosen by measurement, as
   the trainer runs it) and float32: the median ms per step, then the step's *minimum* traffic
   (every weight read once, plus the KV cache read once) and FLOPs (2 x parameters x rows for
   the linears incl. the LM head, plus 4 x layers x context x hidden x rows for attention), as
   achieved GB/s and GFLOP/s, and each as a fraction of (1) and (2).

The fractions say which limit a step sits under: a step at 16 rows of a 135M model does ~4
GFLOP and reads ~270 MB (bf16), so on a 2-core CPU it is neither at the bandwidth nor at the
GEMM roof when it is dominated by per-operation overhead (30 layers of small ops), which is what
the gap measures.

    .venv/bin/python bench/cpu_limit.py                    # ~2 min at 2 threads
    .venv/bin/python bench/cpu_limit.py --mib 64 --repeats 2 --steps 3 --no-decode   # smoke

Writes bench/results/cpu_limit.json (with the CPU flags) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile_rollout import PROMPTS, ROWS_PER_PROMPT, ours_variant  # noqa: E402
from vs_trl import SEED, cpu_info, prompt_messages, thread_env  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_limit.json"


def best_seconds(fn: Any, repeats: int) -> float:
    fn()  # warm-up: page faults, allocator, kernel choice
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def memory_bandwidth(mib: int, repeats: int) -> dict[str, float]:
    """STREAM copy and triad on float32 arrays of `mib` MiB each, in GB/s."""
    n = mib * 2**20 // 4
    a, b, c = torch.empty(n), torch.rand(n), torch.rand(n)
    copy = best_seconds(lambda: a.copy_(b), repeats)
    triad = best_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)
    nbytes = n * 4
    return {"copy_gb_s": 2 * nbytes / copy / 1e9, "triad_gb_s": 3 * nbytes / triad / 1e9}


def gemm_rate(
    shape: tuple[int, int, int], dtype: torch.dtype, repeats: int, flop_per_timing: float = 2e9
) -> float:
    """GFLOP/s of `[m, k] x [k, n]` in `dtype` (2 m k n flops a product); each timing runs
    enough products for `flop_per_timing`, so that small shapes time well."""
    m, k, n = shape
    x, w = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    inner = max(1, int(flop_per_timing // (2 * m * k * n)))

    def run() -> None:
        for _ in range(inner):
            torch.mm(x, w)

    return 2 * m * k * n * inner / best_seconds(run, repeats) / 1e9


def step_cost(model: Any, rows: int, context: int, bytes_per_weight: int) -> dict[str, float]:
    """The minimum bytes and FLOPs of one decoding step: every weight read once (the tied
    embedding counts once, as the LM head), the KV cache of `context` tokens read once."""
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    kv_bytes = 2 * cfg.num_hidden_layers * context * cfg.num_key_value_heads * head_dim
    kv_bytes *= rows * bytes_per_weight
    embedding = cfg.vocab_size * cfg.hidden_size  # a lookup, not a GEMM, unless it is the head
    linear_params = params - (0 if cfg.tie_word_embeddings else embedding)
    flops = 2 * linear_params * rows + 4 * cfg.num_hidden_layers * context * cfg.hidden_size * rows
    return {"bytes": params * bytes_per_weight + kv_bytes, "flops": float(flops)}


def decode_steps(steps: int) -> list[dict[str, Any]]:
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    model, tokenizer = load_policy(ModelConfig(dtype="float32"), seed=SEED)
    messages = prompt_messages(PROMPTS)
    prompts = [encode_prompt(tokenizer, m) for m in messages for _ in range(ROWS_PER_PROMPT)]
    out = []
    for name, nbytes in (("ours-bf16-auto", 2), ("ours-fp32", 4)):
        run, clock, info = ours_variant(name, model, tokenizer, prompts)
        run(4)  # warm-up (and, for auto, the one-time choice of fast paths)
        clock.starts.clear()
        run(steps + 1)
        ms = statistics.median(clock.step_ms())
        context = max(len(p) for p in prompts) + steps // 2  # the mean context of the steps
        cost = step_cost(model, len(prompts), context, nbytes)
        out.append(
            {
                "variant": name,
                "rows": len(prompts),
                "context": context,
                "step_ms": ms,
                "min_bytes": cost["bytes"],
                "flops": cost["flops"],
                "achieved_gb_s": cost["bytes"] / (ms / 1000) / 1e9,
                "achieved_gflop_s": cost["flops"] / (ms / 1000) / 1e9,
                "setup": info,
            }
        )
    return out


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx", "fma", "amx", "f16c", "vnni", "bf16")
                return sorted({f for f in line.split(":", 1)[1].split() if f.startswith(wanted)})
    except OSError:
        pass
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=512, help="size of each STREAM array")
    parser.add_argument("--gemm-n", type=int, default=2048, help="square GEMM size")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=24, help="decoding steps timed")
    parser.add_argument("--no-decode", action="store_true", help="skip the model (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.manual_seed(SEED)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    bandwidth = memory_bandwidth(args.mib, args.repeats)
    n = args.gemm_n
    gemm = {
        "square_fp32_gflop_s": gemm_rate((n, n, n), torch.float32, args.repeats),
        "square_bf16_gflop_s": gemm_rate((n, n, n), torch.bfloat16, args.repeats),
        "decode_fp32_gflop_s": gemm_rate((16, 576, 1536), torch.float32, args.repeats),
        "decode_bf16_gflop_s": gemm_rate((16, 576, 1536), torch.bfloat16, args.repeats),
    }
    steps = [] if args.no_decode else decode_steps(args.steps)
    peak_bw = max(bandwidth.values())
    for s in steps:
        peak = gemm["square_bf16_gflop_s" if "bf16" in s["variant"] else "square_fp32_gflop_s"]
        s["fraction_of_bandwidth"] = s["achieved_gb_s"] / peak_bw
        s["fraction_of_peak_gemm"] = s["achieved_gflop_s"] / peak
    result = {
        "command": "python " + " ".join(sys.argv),
        "machine": {
            "cpu": cpu_info(),
            "flags": cpu_flags(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "thread_env": thread_env(),
            "load_average_at_end": os.getloadavg(),
        },
        "stream": bandwidth | {"mib_per_array": args.mib},
        "gemm": gemm | {"square_n": n},
        "decoding": steps,
    }
    print(f"memory: copy {bandwidth['copy_gb_s']:.1f} GB/s, triad {bandwidth['triad_gb_s']:.1f}")
    print(", ".join(f"{k} {v:.0f}" for k, v in gemm.items()))
    for s in steps:
        print(
            f"{s['variant']}: {s['step_ms']:.1f} ms/step, {s['achieved_gb_s']:.1f} GB/s "
            f"({100 * s['fraction_of_bandwidth']:.0f}% of bandwidth), "
            f"{s['achieved_gflop_s']:.0f} GFLOP/s ({100 * s['fraction_of_peak_gemm']:.0f}% of GEMM)"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

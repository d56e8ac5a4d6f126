"""Today's decoding step vs the compiled one (`rollout.compiled_decode`), against the CPU's limits.

The shape of `bench/profile_rollout.py` / `bench/cpu_limit.py`: the bundled SmolLM2-135M,
2 search_qa prompts x 8 samples = 16 rows, temperature 1, end of sequence off (all rows decode
every step), no KV kept for a next turn. Per precision (bf16: the generator's bfloat16 copy
with its fast paths chosen by measurement; fp32) two generators share the model:

- `today`: `HFGenerator(compiled_decode="never")`, the model's forward over a DynamicCache;
- `compiled`: `HFGenerator(compiled_decode="always")`, backends/compiled.py's compiled decoder
  layer over a preallocated KV cache (its first call compiles: `compile_s`; its one-time check
  against the forward: `max_logprob_diff`, and each path's sampled-token logprob error from the
  float32 model, `sampled_error`; a refused compiled step is reported as such, with no speed-up).

A step's time is the gap between the starts of consecutive decoding steps
(`HFGenerator._decode_step`, which both paths go through): forward + sampling + bookkeeping,
as `bench/cpu_limit.py` times it. Interleaved A/B: every round runs one generate per arm, the
order flipped each round; the median over all rounds' steps counts. Each step's minimum traffic
and FLOPs (`cpu_limit.step_cost`) over its time give achieved GB/s and GFLOP/s, reported as
fractions of this machine's STREAM bandwidth and square-GEMM rate measured in the same run.
The greedy tokens of both arms are compared too (`greedy_agree`: the fraction of rows whose
16 greedy tokens are identical; bf16 rounding may part a few).

    .venv/bin/python bench/compiled_decode.py             # bundled model, ~5 min at 2 threads
    .venv/bin/python bench/compiled_decode.py --smoke     # tiny random model, seconds

Writes bench/results/compiled_decode.json (with the CPU flags) and prints a table.
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

from cpu_limit import cpu_flags, gemm_rate, memory_bandwidth, step_cost  # noqa: E402
from profile_rollout import PROMPTS, ROWS_PER_PROMPT, StepClock  # noqa: E402
from vs_trl import SEED, cpu_info, prompt_messages, thread_env  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "compiled_decode.json"
ARMS = ("today", "compiled")
PRECISIONS = {"bf16": 2, "fp32": 4}  # bytes per weight


def make_arm(model: Any, tokenizer: Any, prompts: list[list[int]], precision: str, arm: str):
    """A generate(new_tokens) closure over a fresh generator for `arm`, and its step clock."""
    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.types import SamplingParams

    generator = HFGenerator(
        model,
        tokenizer,
        max_batch_size=len(prompts),
        eos_token_ids=[-1],  # never sampled: every row decodes every step
        prefix_cache=False,
        mixed_precision="bf16" if precision == "bf16" else "no",
        compiled_decode="always" if arm == "compiled" else "never",
    )
    clock = StepClock()
    generator._decode_step = clock.wrap(generator._decode_step)  # type: ignore[method-assign]

    def run(new_tokens: int, temperature: float = 1.0) -> list[list[int]]:
        params = SamplingParams(
            max_new_tokens=new_tokens, temperature=temperature, top_p=1.0, stop=[], seed=SEED
        )
        return [c.token_ids for c in generator.generate(prompts, params)]

    return generator, run, clock


def gaps_ms(starts: list[float]) -> list[float]:
    """Milliseconds between consecutive step starts (each gap: one whole decoding step)."""
    return [1000 * (b - a) for a, b in zip(starts, starts[1:], strict=False)]


def measure_precision(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    precision: str,
    steps: int,
    rounds: int,
    limits: dict[str, float],
) -> dict[str, Any]:
    arms = {arm: make_arm(model, tokenizer, prompts, precision, arm) for arm in ARMS}
    setup: dict[str, Any] = {}
    for arm, (generator, run, _) in arms.items():
        start = time.perf_counter()
        run(2)  # builds the bf16 copy, chooses its fast paths; compiles the compiled step
        setup[arm] = {
            "first_call_s": time.perf_counter() - start,
            "fast_paths": generator.fast_paths,
            "compiled_decode": generator.compiled_decode,
        }
    greedy = {arm: run(steps, temperature=0.0) for arm, (_, run, _) in arms.items()}
    agree = sum(a == b for a, b in zip(greedy["today"], greedy["compiled"], strict=True))
    step_ms: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for r in range(rounds):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            _, run, clock = arms[arm]
            clock.starts.clear()
            run(steps + 1)  # the first token comes from the prefill: `steps` decoding steps
            step_ms[arm] += gaps_ms(clock.starts)
    context = max(len(p) for p in prompts) + steps // 2  # the mean context of the steps
    cost = step_cost(model, len(prompts), context, PRECISIONS[precision])
    peak = limits["square_bf16_gflop_s" if precision == "bf16" else "square_fp32_gflop_s"]
    arms_out: dict[str, Any] = {}
    for arm in ARMS:
        ms = statistics.median(step_ms[arm])
        gb_s = cost["bytes"] / (ms / 1000) / 1e9
        gflop_s = cost["flops"] / (ms / 1000) / 1e9
        arms_out[arm] = {
            "step_ms": ms,
            "step_ms_min": min(step_ms[arm]),
            "step_ms_max": max(step_ms[arm]),
            "steps_timed": len(step_ms[arm]),
            "achieved_gb_s": gb_s,
            "achieved_gflop_s": gflop_s,
            "fraction_of_bandwidth": gb_s / limits["bandwidth_gb_s"],
            "fraction_of_peak_gemm": gflop_s / peak,
        } | setup[arm]
    # A refused compiled step (it failed to compile or disagreed with the forward) decodes on
    # the forward: its arm then times the forward twice, and no speed-up is claimed.
    used = bool((setup["compiled"]["compiled_decode"] or {}).get("used"))
    return {
        "precision": precision,
        "rows": len(prompts),
        "context": context,
        "min_bytes": cost["bytes"],
        "flops": cost["flops"],
        "arms": arms_out,
        "compiled_used": used,
        "speedup": arms_out["today"]["step_ms"] / arms_out["compiled"]["step_ms"] if used else None,
        "greedy_agree": agree / len(prompts),
    }


def load(smoke: bool) -> tuple[Any, Any, list[list[int]]]:
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    model, tokenizer = load_policy(ModelConfig(name="tiny" if smoke else "smollm2-135m"), SEED)
    messages = prompt_messages(PROMPTS)
    prompts = [encode_prompt(tokenizer, m) for m in messages for _ in range(ROWS_PER_PROMPT)]
    return model, tokenizer, prompts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="decoding steps per generate")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved A/B rounds")
    parser.add_argument("--precisions", default="bf16,fp32", help="comma-separated: bf16,fp32")
    parser.add_argument("--smoke", action="store_true", help="tiny random model, small limits")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    precisions = [p for p in args.precisions.split(",") if p]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        parser.error(f"--precisions: {args.precisions!r} (known: {', '.join(PRECISIONS)})")
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be >= 2 and --rounds >= 1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.manual_seed(SEED)
    wall = time.perf_counter()
    mib, n, repeats = (8, 256, 1) if args.smoke else (512, 2048, 5)
    bandwidth = memory_bandwidth(mib, repeats)
    limits = {
        "bandwidth_gb_s": max(bandwidth.values()),
        "square_fp32_gflop_s": gemm_rate((n, n, n), torch.float32, repeats),
        "square_bf16_gflop_s": gemm_rate((n, n, n), torch.bfloat16, repeats),
    }
    model, tokenizer, prompts = load(args.smoke)
    results = [
        measure_precision(model, tokenizer, prompts, p, args.steps, args.rounds, limits)
        for p in precisions
    ]
    record = {
        "command": "python bench/compiled_decode.py " + " ".join(argv or sys.argv[1:]),
        "model": "tiny (random, 2 layers)" if args.smoke else "smollm2-135m (bundled)",
        "machine": {
            "cpu": cpu_info(),
            "flags": cpu_flags(),
            "cores": os.cpu_count(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "thread_env": thread_env(),
            "load_average_at_end": os.getloadavg(),
        },
        "limits": limits | {"stream": bandwidth, "mib_per_array": mib, "square_n": n},
        "setup": {
            "rows": len(prompts),
            "steps_per_generate": args.steps,
            "rounds": args.rounds,
            "eos": "off (all rows decode every step)",
            "seed": SEED,
        },
        "results": results,
        "wall_s": time.perf_counter() - wall,
    }
    print("| precision | arm | ms/step | GB/s (of bandwidth) | GFLOP/s (of GEMM) | compile s |")
    print("|---|---|---:|---:|---:|---:|")
    for res in results:
        for arm, a in res["arms"].items():
            compile_s = (a["compiled_decode"] or {}).get("compile_s")
            print(
                f"| {res['precision']} | {arm} | {a['step_ms']:.1f} | {a['achieved_gb_s']:.1f} "
                f"({100 * a['fraction_of_bandwidth']:.0f}%) | {a['achieved_gflop_s']:.0f} "
                f"({100 * a['fraction_of_peak_gemm']:.0f}%) | "
                f"{'' if compile_s is None else f'{compile_s:.1f}'} |"
            )
        decided = res["arms"]["compiled"]["compiled_decode"] or {}
        if res["compiled_used"]:
            print(
                f"{res['precision']}: speedup {res['speedup']:.2f}x, greedy agree "
                f"{100 * res['greedy_agree']:.0f}%, sampled-token logprob error vs the "
                f"exact model {decided.get('sampled_error')}"
            )
        else:
            print(f"{res['precision']}: compiled step refused ({decided.get('chosen_by')})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"wrote {args.out} ({record['wall_s']:.0f} s)")
    return record


if __name__ == "__main__":
    main()

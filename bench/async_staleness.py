"""Synchronous vs asynchronous rollouts (rollout.max_staleness 0, 1, 2) with a slow tool.

The `calculator_grpo` recipe with every env step delayed by `--latency` seconds
(`env.options={step_latency_s: ...}`, a stand-in for a remote search API or a sandbox), run
end to end through the trainer once per max_staleness value, same seed and settings. Per step
it records the learner's wall-clock (`step_seconds`: waiting for the batch + update), the time
it waited for rollouts, the reward and how stale the trained tokens were; per run, the mean
step time after the first step (the first has nothing to overlap with).

    .venv/bin/python bench/async_staleness.py                       # bundled model, ~25 min
    .venv/bin/python bench/async_staleness.py --model tiny --steps 4 --warm-start 0 \\
        --entropy-coef 0.001                                        # a quick check that it runs

With a random tiny model every reward is equal, so GRPO has no gradient; `--entropy-coef` makes
each step update the weights anyway, so that staleness exists to measure. `--repeats R` runs
the variants R times, interleaved. Torch uses `--threads` (default 1) intra-op threads in each
Python thread, the same for every variant. Writes bench/results/async_staleness.json (or
--out) and prints a markdown table. Timings are only meaningful on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.loop import train

RESULTS = Path(__file__).resolve().parent / "results" / "async_staleness.json"


def run(args: argparse.Namespace, staleness: int, out_dir: Path, repeat: int) -> dict[str, Any]:
    overrides = [
        f"model.name={args.model}",
        f"trainer.steps={args.steps}",
        f"trainer.seed={args.seed}",
        f"trainer.out_dir={out_dir}",
        f"trainer.run_name=staleness_{staleness}_{repeat}",
        "trainer.eval_before=false",
        "trainer.progress=false",
        "trainer.tensorboard=false",
        f"trainer.save_every={args.steps}",
        f"warm_start.num_tasks={args.warm_start}",
        f"env.num_eval_tasks={args.eval_tasks}",
        f"rollout.eval_batch_size={args.eval_tasks}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        f"rollout.group_size={args.group_size}",
        f"rollout.max_tokens_per_turn={args.max_tokens}",
        f"rollout.max_staleness={staleness}",
        f"algo.entropy_coef={args.entropy_coef}",
        f"env.options={{step_latency_s: {args.latency}}}",
    ]
    cfg = load_config("calculator_grpo", overrides)
    start = time.perf_counter()
    summary = train(cfg)
    wall = time.perf_counter() - start
    metrics = out_dir / f"staleness_{staleness}_{repeat}" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    steps = [m for m in map(json.loads, lines) if "train/reward" in m]
    per_step = [
        {
            "step": m["step"],
            "step_seconds": round(m["train/step_seconds"], 3),
            "rollout_wait_seconds": round(m["train/rollout_seconds"], 3),
            "reward": m["train/reward"],
            "success": m["train/success"],
            "staleness_mean": m.get("train/staleness_mean", 0.0),
            "partial_rollouts": m.get("train/partial_rollouts", 0.0),
        }
        for m in steps
    ]
    later = [s["step_seconds"] for s in per_step[1:]] or [per_step[0]["step_seconds"]]
    return {
        "max_staleness": staleness,
        "repeat": repeat,
        "mean_step_seconds_after_first": round(statistics.mean(later), 3),
        "run_wall_seconds": round(wall, 1),
        "eval_success_after": summary.get("after", {}).get("success"),
        "steps": per_step,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds per env step")
    parser.add_argument(
        "--warm-start",
        type=int,
        default=40,
        help="expert episodes (0: none). 40 leaves the reward mid-range (~0.3); after the "
        "recipe's 200 every episode succeeds, GRPO gets no gradient and there is nothing to "
        "overlap (measured)",
    )
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--eval-tasks", type=int, default=20)
    parser.add_argument("--entropy-coef", type=float, default=0.0)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads per Python thread (on a busy 2-core machine, 2 threads in "
        "the main thread were measured ~10x slower than 1, which would favour the async runs)",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="rounds over the variants, interleaved"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="async_staleness_") as tmp:
        # Interleaved (0, 1, 2, 0, 1, 2...) so a change in machine load hits every variant.
        runs = [run(args, k, Path(tmp), r) for r in range(args.repeats) for k in args.staleness]
    result = {
        "benchmark": "async_staleness",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
        },
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| max_staleness | repeat | mean step s (after 1st) | run wall s | rewards per step |")
    print("|---:|---:|---:|---:|---|")
    for r in runs:
        rewards = ", ".join(f"{s['reward']:.2f}" for s in r["steps"])
        print(
            f"| {r['max_staleness']} | {r['repeat']} | {r['mean_step_seconds_after_first']} | "
            f"{r['run_wall_seconds']} | {rewards} |"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

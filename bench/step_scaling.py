"""How the cost of one GRPO step of ours grows with group size and response length (CPU).

The same single-turn step as `bench/vs_trl.py` (HFGenerator rollout of B prompts x G samples,
parity reward, learner advantages + update; bundled SmolLM2-135M, fp32), on two axes:

- group size G in --group-sizes at response length --base-length (B=2 prompts, so 2G sequences);
- response length L in --lengths at group size --base-group (2 x 8 = 16 sequences).

By default EOS is ignored (--no-eos) so every completion is exactly L tokens long and the curve
shows the cost of the length itself, not of where the model happens to stop. The reward
alternates 1, 0, 1, 0... within each group, so every group has mixed rewards and every sequence
goes through the update (the parity reward of vs_trl.py leaves a 4-sample group constant one
time in eight, and the learner rightly skips such rows: that would bend the curve). One process, one
model; a warm-up step first; then the points from cheapest to dearest. Peak RSS per point is
sampled from /proc every 10 ms (the 16 x 512 point is the issue's 4 GiB memory target).

    .venv/bin/python bench/step_scaling.py                    # full grid, 2 steps per point
    .venv/bin/python bench/step_scaling.py --steps 1 --lengths 64 128 256

Writes bench/results/step_scaling.json and step_scaling.png and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import (  # noqa: E402  (bench/ is not a package)
    SEED,
    make_optimizer,
    our_config,
    our_step,
    peak_rss_mib,
    prompt_messages,
    rss_mib,
)

RESULTS = Path(__file__).resolve().parent / "results"


def alternating_reward(row: int, text: str) -> float:
    # Group sizes are even, so row parity is the parity of the index within the group.
    return float(row % 2 == 0)


class PeakRSS:
    """Samples this process's RSS in a background thread; `peak` since the last `reset`."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        page_mib = os.sysconf("SC_PAGE_SIZE") / 2**20
        with open("/proc/self/statm") as statm:
            while not self._stop.is_set():
                statm.seek(0)
                self.peak = max(self.peak, int(statm.read().split()[1]) * page_mib)
                time.sleep(self.interval_s)

    def reset(self) -> None:
        self.peak = rss_mib()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def plot(points: list[dict[str, Any]], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = [
        ("group_size", "group", f"group size G (B=2 prompts, L={args.base_length})"),
        ("length", "length", f"response length L (B=2 x G={args.base_group})"),
    ]
    for ax, (key, axis, label) in zip(axes, panels, strict=True):
        rows = sorted((p for p in points if axis in p["axes"]), key=lambda p: p[key])
        if not rows:
            ax.set_visible(False)
            continue
        xs = [p[key] for p in rows]
        for field, style in (("step_s", "o-"), ("rollout_s", "s--"), ("update_s", "^--")):
            ax.plot(xs, [p[field] for p in rows], style, label=field.replace("_s", ""))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel(label)
        ax.set_ylabel("seconds (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("agentic_rl GRPO step on CPU (SmolLM2-135M fp32, 2 cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group-sizes", type=int, nargs="*", default=[4, 8, 16, 32])
    parser.add_argument("--lengths", type=int, nargs="*", default=[64, 128, 256, 512])
    parser.add_argument("--base-length", type=int, default=64)
    parser.add_argument("--base-group", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2, help="measured steps per point")
    parser.add_argument("--eos", action="store_true", help="stop at EOS (default: ignore it)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--out", type=Path, default=RESULTS / "step_scaling.json")
    args = parser.parse_args()

    import torch

    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    wall0 = time.perf_counter()
    torch.manual_seed(SEED)
    model, tokenizer = load_policy(ModelConfig(dtype="float32"), seed=SEED)
    rss_loaded = rss_mib()
    max_g = max([args.base_group, *args.group_sizes])
    generator = HFGenerator(
        model,
        tokenizer,
        max_batch_size=args.prompts * max_g,
        eos_token_ids=None if args.eos else [-1],  # -1: no token ends a completion early
        mixed_precision="bf16" if args.precision == "bf16" else "no",
    )
    grid: dict[tuple[int, int], set[str]] = {}
    for g in args.group_sizes:
        grid.setdefault((g, args.base_length), set()).add("group")
    for length in args.lengths:
        grid.setdefault((args.base_group, length), set()).add("length")
    order = sorted(grid, key=lambda gl: gl[0] * gl[1])
    n_points = len(order)
    messages = prompt_messages(args.prompts * (1 + n_points * args.steps))
    prompt_ids = [encode_prompt(tokenizer, m) for m in messages]
    optimizer = make_optimizer(our_config(64, 4, args.prompts, 5e-6, args.precision), model)
    sampler = PeakRSS()
    step = 0

    def chosen() -> list[list[int]]:
        return prompt_ids[step * args.prompts : (step + 1) * args.prompts]

    first_g, first_l = order[0]
    warm = our_step(
        our_config(first_l, first_g, args.prompts, 5e-6, args.precision),
        model,
        tokenizer,
        generator,
        optimizer,
        chosen(),
        step,
        alternating_reward,
    )
    step += 1
    print(f"warm-up G={first_g} L={first_l}: {warm['step_s']:.2f}s", flush=True)
    points = []
    for g, length in order:
        cfg = our_config(length, g, args.prompts, 5e-6, args.precision)
        sampler.reset()
        runs = []
        for _ in range(args.steps):
            runs.append(
                our_step(
                    cfg, model, tokenizer, generator, optimizer, chosen(), step, alternating_reward
                )
            )
            step += 1
        point = {
            "group_size": g,
            "length": length,
            "axes": sorted(grid[(g, length)]),
            "sequences": args.prompts * g,
            "steps": args.steps,
            "step_s": statistics.median(r["step_s"] for r in runs),
            "step_s_min": min(r["step_s"] for r in runs),
            "step_s_max": max(r["step_s"] for r in runs),
            "rollout_s": statistics.median(r["rollout_s"] for r in runs),
            "update_s": statistics.median(r["update_s"] for r in runs),
            "rollout_tokens_per_s": sum(r["completion_tokens"] for r in runs)
            / sum(r["rollout_s"] for r in runs),
            "mean_completion_len": statistics.fmean(r["mean_completion_len"] for r in runs),
            "trained_sequences": [r["trained_sequences"] for r in runs],
            "peak_rss_mib": sampler.peak,
            "process_peak_rss_mib": peak_rss_mib(),
            "runs": runs,
        }
        points.append(point)
        print(
            f"G={g:>2} L={length:>3} ({point['sequences']} seqs): step {point['step_s']:.2f}s "
            f"(rollout {point['rollout_s']:.2f}s, update {point['update_s']:.2f}s), "
            f"{point['rollout_tokens_per_s']:.0f} tok/s, peak RSS {point['peak_rss_mib']:.0f} MiB",
            flush=True,
        )
    sampler.close()

    print()
    print(
        "| G | L | sequences | step s (median) | min-max | rollout s | update s | rollout tok/s "
        "| mean len | peak RSS MiB |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in points:
        print(
            f"| {p['group_size']} | {p['length']} | {p['sequences']} | {p['step_s']:.2f} "
            f"| {p['step_s_min']:.2f}-{p['step_s_max']:.2f} | {p['rollout_s']:.2f} "
            f"| {p['update_s']:.2f} | {p['rollout_tokens_per_s']:.0f} "
            f"| {p['mean_completion_len']:.0f} | {p['peak_rss_mib']:.0f} |"
        )
    record = {
        "command": "python " + " ".join(sys.argv),
        "settings": {
            "prompts_per_step": args.prompts,
            "steps_per_point": args.steps,
            "eos_stops": args.eos,
            "torch_threads": torch.get_num_threads(),
            "cpus": os.cpu_count(),
            "model": "bundled SmolLM2-135M-Instruct, fp32",
        },
        "rss_after_load_mib": rss_loaded,
        "warmup": warm,
        "points": points,
        "bench_wall_s": time.perf_counter() - wall0,
        "load_average_at_end": os.getloadavg(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2))
    png = args.out.with_suffix(".png")
    plot(points, args, png)
    print(f"wrote {args.out} and {png} ({record['bench_wall_s']:.0f} s)")


if __name__ == "__main__":
    main()

"""On-policy distillation vs SFT at the same budget, on the bundled model: held-out success per
optimizer step and per wall-clock second, three seeds.

Teacher: the default recipe (`search_qa_grpo`: expert warm start + 60 GRPO steps) trained once
(seed 0) into runs/distill_teacher, unless `--teacher DIR` names one. Student: the untrained
bundled model (no warm start) in both arms.

  * distill  `onpolicy_distill` recipe: the student samples 4 tasks x 4 episodes a step, the
             teacher scores every sampled token, the advantage is the per-token reverse KL
             (task reward ignored); 2 PPO mini-batches = 2 optimizer steps a step, lr 1e-5.
  * sft      supervised fine-tuning on scripted-expert episodes of the same tasks (the data the
             teacher's own warm start used), batch 8, lr 1e-4, for as many optimizer steps as
             the distill arm took; evaluated at the same optimizer-step marks.

Both are evaluated greedily on the recipe's 100 held-out tasks. Time limits are off (budget in
optimizer steps); wall-clock seconds are recorded per arm on this machine.

    .venv/bin/python bench/distill_vs_sft.py              # teacher if missing, then 3 seeds

Writes bench/results/distill_vs_sft.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentic_rl.backends.base import sync_weights
from agentic_rl.config.load import load_config
from agentic_rl.train.collect import evaluate, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.sft import train_sft

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "distill_vs_sft.json"
OPT_STEPS_PER_STEP = 2  # onpolicy_distill: algo.ppo_mini_batches


def cli(*argv: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", *argv], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"agentic-rl {' '.join(argv)} failed:\n{done.stderr[-3000:]}")


def teacher(args: argparse.Namespace) -> tuple[Path, float]:
    """The teacher run directory (trained here if missing) and its training seconds."""
    path = Path(args.teacher) if args.teacher else ROOT / "runs" / "distill_teacher"
    if (path / "summary.json").is_file():
        return path, 0.0
    t0 = time.time()
    out = [f"trainer.out_dir={path.parent}", f"trainer.run_name={path.name}"]
    cli("train", "search_qa_grpo", *out, "trainer.max_minutes=0", "trainer.progress=false")
    return path, time.time() - t0


def distill_arm(args: argparse.Namespace, path: Path, seed: int, out: Path) -> dict[str, Any]:
    t0 = time.time()
    name = f"distill-{seed}"
    cli(
        "train",
        "onpolicy_distill",
        f"distill.teacher={path}",
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"trainer.eval_every={args.eval_every}",
        "trainer.max_minutes=0",
        "trainer.progress=false",
        "trainer.log_trajectories=0",
        f"trainer.out_dir={out}",
        f"trainer.run_name={name}",
    )
    rows = [json.loads(line) for line in (out / name / "metrics.jsonl").open()]
    seconds, evals, kl = 0.0, [], []
    for r in rows:
        seconds += r.get("train/step_seconds", 0.0)
        if "train/distill_reverse_kl" in r:
            kl.append({"step": r["step"], "reverse_kl": r["train/distill_reverse_kl"]})
        if "eval/success" in r:
            evals.append(
                {
                    "optimizer_steps": r["step"] * OPT_STEPS_PER_STEP,
                    "train_seconds": seconds,
                    "success": r["eval/success"],
                }
            )
    return {"eval": evals, "reverse_kl": kl, "wall_seconds": time.time() - t0}


def sft_arm(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    t0 = time.time()
    cfg = load_config(
        "search_qa_grpo",
        [f"trainer.seed={seed}", "warm_start.num_tasks=0", "trainer.progress=false"],
    )
    setup = build(cfg)
    total = args.steps * OPT_STEPS_PER_STEP
    marks = sorted({m * OPT_STEPS_PER_STEP for m in range(0, args.steps + 1, args.eval_every)})
    demos, _ = expert_demos(setup, args.sft_tasks)
    evals, seconds, done = [], 0.0, 0
    evals.append(
        {"optimizer_steps": 0, "train_seconds": 0.0, "success": evaluate(setup)["success"]}
    )
    generator = torch.Generator().manual_seed(seed)
    for mark in marks[1:]:
        need = (mark - done) * args.sft_batch
        chosen = torch.randint(len(demos), (need,), generator=generator).tolist()
        s0 = time.time()
        train_sft(
            setup.policy,
            [demos[i] for i in chosen],
            setup.tokenizer.pad_token_id,
            epochs=1,
            lr=args.sft_lr,
            batch_size=args.sft_batch,
            seed=seed + mark,
        )
        seconds += time.time() - s0
        done = mark
        sync_weights(setup.generator, setup.policy)
        evals.append(
            {
                "optimizer_steps": mark,
                "train_seconds": seconds,
                "success": evaluate(setup)["success"],
            }
        )
    assert done == total
    return {"eval": evals, "demos": len(demos), "wall_seconds": time.time() - t0}


def summarise(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm and evaluation mark: held-out success (mean, min, max over seeds) and the
    mean training seconds to reach it (evaluation time excluded)."""
    rows = []
    for arm, seeds in results.items():
        runs = list(seeds.values())
        for i, point in enumerate(runs[0]["eval"]):
            success = [r["eval"][i]["success"] for r in runs]
            rows.append(
                {
                    "arm": arm,
                    "optimizer_steps": point["optimizer_steps"],
                    "seeds": len(runs),
                    "success": statistics.fmean(success),
                    "success_min": min(success),
                    "success_max": max(success),
                    "train_seconds": statistics.fmean(r["eval"][i]["train_seconds"] for r in runs),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--teacher", default="")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30, help="distill RL steps (x2 opt. steps)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--sft-tasks", type=int, default=256)
    parser.add_argument("--sft-batch", type=int, default=8)
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    args = parser.parse_args()
    path, teacher_seconds = teacher(args)
    teacher_summary = json.loads((path / "summary.json").read_text())
    results: dict[str, Any] = {"distill": {}, "sft": {}}
    with tempfile.TemporaryDirectory(prefix="distill-") as tmp:
        for seed in args.seeds:
            print(f"[seed {seed}] distill", flush=True)
            results["distill"][str(seed)] = distill_arm(args, path, seed, Path(tmp))
            print(f"[seed {seed}] sft", flush=True)
            results["sft"][str(seed)] = sft_arm(args, seed)
            RESULTS.write_text(
                json.dumps(
                    {
                        "command": " ".join(sys.argv),
                        "teacher": str(path),
                        "teacher_summary": teacher_summary,
                        "teacher_train_seconds": teacher_seconds,
                        "args": vars(args),
                        "machine": platform.platform(),
                        "results": results,
                        "summary": summarise(results),
                        "final": {row["arm"]: row for row in summarise(results)},
                    },
                    indent=1,
                )
            )
    print("| arm | optimizer steps | seeds | held-out success (mean, range) | train seconds |")
    print("|---|---|---|---|---|")
    for row in summarise(results):
        print(
            f"| {row['arm']} | {row['optimizer_steps']} | {row['seeds']} | {row['success']:.3f}"
            f" ({row['success_min']:.2f}-{row['success_max']:.2f}) | {row['train_seconds']:.0f} |"
        )


if __name__ == "__main__":
    main()

"""DAPO dynamic sampling vs plain GRPO where most groups are all-correct (or all-wrong).

A strong supervised warm start on the grid world (scripted BFS expert, step samples) leaves the
tiny model succeeding in most sampled episodes, so most GRPO groups have equal rewards and
carry no gradient. The run is the `gigpo_gridworld` recipe with `algo.name=grpo` (step-wise
rollouts; every step gets its episode's advantage), KL off. Plain GRPO trains on whatever one rollout batch gives; with dynamic sampling
(`filters.dynamic_sampling=true`) groups with equal rewards are dropped and fresh tasks are
rolled out until the batch holds `tasks_per_step` groups with a reward spread. Both start
from the same weights and run the same number of steps with the same seeds; the two runs of
a seed go in parallel (one process, one torch thread each). Per step we record the
useful-gradient fraction (samples whose advantage is non-zero / samples trained on), the
rollout batches generated and the time.

    .venv/bin/python bench/dapo_dynamic_sampling.py     # tiny model, ~8 minutes on 2 cores

Writes bench/results/dapo_dynamic_sampling.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.collect import evaluate, expert_demos
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer, set_learning_rate
from agentic_rl.train.sft import train_sft

RESULTS = Path(__file__).resolve().parent / "results" / "dapo_dynamic_sampling.json"
VARIANTS = {"grpo": [], "grpo+dynamic_sampling": ["filters.dynamic_sampling=true"]}


def overrides(args: argparse.Namespace, seed: int, variant: str) -> list[str]:
    return [
        f"model.name={args.model}",
        "algo.name=grpo",
        "algo.kl_coef=0",
        "algo.loss_agg=token-mean",
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"optim.lr={args.lr}",
        f"env.num_eval_tasks={args.eval_tasks}",
        f"rollout.eval_batch_size={args.eval_tasks}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        f"rollout.group_size={args.group_size}",
        "trainer.progress=false",
        *VARIANTS[variant],
    ]


def warm_start(args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], float]:
    setup = build(load_config("gigpo_gridworld", overrides(args, args.seeds[0], "grpo")))
    demos, _ = expert_demos(setup, args.warm_episodes)
    train_sft(
        setup.policy,
        demos,
        setup.tokenizer.pad_token_id,
        epochs=args.warm_epochs,
        lr=args.warm_lr,
        batch_size=16,
        seed=0,
    )
    return setup.policy.state_dict(), evaluate(setup)["success"]


def run(args: argparse.Namespace, seed: int, variant: str, weights_path: str) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    cfg = load_config("gigpo_gridworld", overrides(args, seed, variant))
    setup = build(cfg)
    setup.policy.load_state_dict(torch.load(weights_path))
    optimizer = make_optimizer(setup)
    steps, start = [], time.perf_counter()
    for step in range(1, args.steps + 1):
        set_learning_rate(optimizer, cfg, step)
        m = train_step(setup, optimizer, step)
        steps.append(
            {
                "useful_fraction": m["nonzero_adv_fraction"],
                "useful_samples": m["nonzero_adv_fraction"] * m["samples"],
                "zero_variance_groups": m["zero_variance_groups"],
                "gen_batches": m["gen_batches"],
                "success": m["success"],
                "seconds": m["step_seconds"],
            }
        )
    return {
        "steps": steps,
        "rl_seconds": time.perf_counter() - start,
        "eval_success": evaluate(setup)["success"],
    }


def mean_sd(values: list[float], fmt: str = ".2f") -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):{fmt}} ± {sd:{fmt}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--warm-episodes", type=int, default=256)
    parser.add_argument("--warm-epochs", type=int, default=8)
    parser.add_argument("--warm-lr", type=float, default=1e-2)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bench_start = time.perf_counter()
    weights, warm_success = warm_start(args)
    print(f"warm start: greedy success {warm_success:.3f}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "warm.pt")
        torch.save(weights, path)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
            for seed in args.seeds:
                jobs = {v: pool.submit(run, args, seed, v, path) for v in VARIANTS}
                for variant, job in jobs.items():
                    runs.append({"seed": seed, "variant": variant} | job.result())
                    useful = [s["useful_fraction"] for s in runs[-1]["steps"]]
                    print(variant, seed, [round(u, 2) for u in useful], flush=True)
    total = time.perf_counter() - bench_start
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps({"args": vars(args), "warm_start_success": warm_success, "runs": runs}, indent=2)
    )
    print(
        "\n| variant | useful-gradient fraction / step | useful samples / step "
        "| zero-variance groups generated | rollout batches / step | s / step "
        "| eval success after RL |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in VARIANTS:
        rows = [r for r in runs if r["variant"] == variant]
        per_run = lambda key, rows=rows: [  # noqa: E731
            statistics.mean(s[key] for s in r["steps"]) for r in rows
        ]
        print(
            f"| {variant} | {mean_sd(per_run('useful_fraction'))} "
            f"| {mean_sd(per_run('useful_samples'), '.1f')} "
            f"| {mean_sd(per_run('zero_variance_groups'))} "
            f"| {mean_sd(per_run('gen_batches'))} | {mean_sd(per_run('seconds'), '.1f')} "
            f"| {mean_sd([r['eval_success'] for r in rows])} |"
        )
    print(f"\nPer-step useful-gradient fraction (seed {args.seeds[0]}):")
    for variant in VARIANTS:
        run0 = next(r for r in runs if r["variant"] == variant and r["seed"] == args.seeds[0])
        print(f"- {variant}: " + " ".join(f"{s['useful_fraction']:.2f}" for s in run0["steps"]))
    print(
        f"\n(warm start greedy success {warm_success:.3f}; mean ± sample std over seeds "
        f"{args.seeds}; total {total:.0f} s)"
    )


if __name__ == "__main__":
    main()

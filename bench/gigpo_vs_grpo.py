"""GiGPO vs GRPO on the grid world: same warm start, same steps, same tasks, 3 seeds.

One supervised warm start on scripted BFS-expert step samples (deliberately partial, so RL has
room to improve); for each RL seed both algorithms start from those exact weights and run the
same number of RL steps of the `gigpo_gridworld` recipe (step-wise rollouts, history window 2,
groups sharing a start state), seeing the same tasks and sampling seeds. The only difference
is the advantage: GRPO gives every step its episode's group-normalised return; GiGPO adds
omega x the step advantage over the steps that acted on the same state. The two runs of a seed
go in parallel, one process and one torch thread each, so they share the machine equally.
Success is measured greedily on held-out layouts after the warm start and after RL.

    .venv/bin/python bench/gigpo_vs_grpo.py            # tiny model, ~10 minutes on 2 cores
    .venv/bin/python bench/gigpo_vs_grpo.py --model smollm2-135m --steps 20   # much slower

Writes bench/results/gigpo_vs_grpo.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import copy
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

RESULTS = Path(__file__).resolve().parent / "results" / "gigpo_vs_grpo.json"


def overrides(args: argparse.Namespace, seed: int, algo: str) -> list[str]:
    return [
        f"model.name={args.model}",
        f"algo.name={algo}",
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"optim.lr={args.lr}",
        f"env.num_eval_tasks={args.eval_tasks}",
        f"rollout.eval_batch_size={args.eval_tasks}",
        f"rollout.group_size={args.group_size}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        "trainer.progress=false",
    ]


def warm_start(args: argparse.Namespace, seed: int) -> tuple[dict[str, torch.Tensor], float]:
    cfg = load_config("gigpo_gridworld", overrides(args, seed, "gigpo"))
    setup = build(cfg)
    demos, _ = expert_demos(setup, args.warm_episodes)
    train_sft(
        setup.policy,
        demos,
        setup.tokenizer.pad_token_id,
        epochs=args.warm_epochs,
        lr=args.warm_lr,
        batch_size=16,
        seed=seed,
    )
    return copy.deepcopy(setup.policy.state_dict()), evaluate(setup)["success"]


def rl_run(args: argparse.Namespace, seed: int, algo: str, weights_path: str) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    weights = torch.load(weights_path)
    cfg = load_config("gigpo_gridworld", overrides(args, seed, algo))
    setup = build(cfg)
    setup.policy.load_state_dict(weights)
    if setup.reference is not None:
        setup.reference.load_state_dict(weights)
    optimizer = make_optimizer(setup)
    train_success, step_adv, start = [], [], time.perf_counter()
    for step in range(1, args.steps + 1):
        set_learning_rate(optimizer, cfg, step)
        metrics = train_step(setup, optimizer, step)
        train_success.append(metrics["success"])
        step_adv.append(metrics.get("step_adv_nonzero", 0.0))
    seconds = time.perf_counter() - start
    tail = max(1, args.steps // 3)
    return {
        "eval_success": evaluate(setup)["success"],
        "train_success_last_third": sum(train_success[-tail:]) / tail,
        "rl_seconds": seconds,
        "step_adv_nonzero": sum(step_adv) / len(step_adv),
    }


def spread(values: list[float]) -> str:
    mean = statistics.mean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.3f} ± {std:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--warm-episodes", type=int, default=256)
    parser.add_argument("--warm-epochs", type=int, default=5)
    parser.add_argument("--warm-lr", type=float, default=1e-2)
    parser.add_argument("--eval-tasks", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runs: list[dict[str, Any]] = []
    bench_start = time.perf_counter()
    weights, warm_success = warm_start(args, args.seeds[0])
    print(f"warm start: greedy success {warm_success:.3f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "warm.pt")
        torch.save(weights, path)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
            for seed in args.seeds:
                jobs = {a: pool.submit(rl_run, args, seed, a, path) for a in ("grpo", "gigpo")}
                for algo, job in jobs.items():
                    runs.append(
                        {"seed": seed, "algo": algo, "warm_start_success": warm_success}
                        | job.result()
                    )
                    print(json.dumps(runs[-1]), flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"args": vars(args), "runs": runs, "seconds": time.perf_counter() - bench_start},
            indent=2,
        )
    )
    print(
        "\n| algorithm | warm start | eval success after RL | train success (last third) "
        "| RL wall time (s) |"
    )
    print("|---|---|---|---|---|")
    for algo in ("grpo", "gigpo"):
        rows = [r for r in runs if r["algo"] == algo]
        print(
            f"| {algo} | {spread([r['warm_start_success'] for r in rows])} "
            f"| {spread([r['eval_success'] for r in rows])} "
            f"| {spread([r['train_success_last_third'] for r in rows])} "
            f"| {spread([r['rl_seconds'] for r in rows])} |"
        )
    total = time.perf_counter() - bench_start
    print(f"\n(mean ± sample std over RL seeds {args.seeds}; total {total:.0f} s)")


if __name__ == "__main__":
    main()

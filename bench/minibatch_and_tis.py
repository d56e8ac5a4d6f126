"""PPO mini-batches vs one-step updates (DAPO), and the rollout/training mismatch with and without
truncated importance sampling (TIS) for bf16 rollouts, on the bundled model.

(a) `dapo_math` (clip-higher 0.2/0.28, token-mean loss, dynamic sampling, soft overlong
    penalty) as the recipe runs it, its rollout batch split into 16 PPO mini-batches (DAPO's
    512 / 32), each an optimizer step whose pi_old is recomputed once before the first, against
    one-step updates (`algo.ppo_mini_batches=1`: the ratio is exactly 1, clip_frac is 0 and
    clip-higher cannot act, which is what every recipe did before mini-batches; clip_high 0.2
    because 0.28 then fails at load). Per step: clip_frac, train reward, optimizer steps.
(b) the same recipe with bf16 rollouts (`rollout.mixed_precision=bf16`) against the fp32
    learner, one-step updates so that the correction is the only difference, with
    `algo.rollout_correction=none` vs `tis` (C = 2). Per step: mismatch_k3 (mean k3 estimate of
    KL(pi_behav || pi_old) on the sampled tokens), mismatch_max_abs (max |log pi_old - log
    pi_behav|), the mean TIS weight and the train reward. The (a) runs give the fp32-rollout
    level of the same metrics.

One supervised warm start (the recipe's: scripted-expert episodes) is shared by every run, so
all start from the same weights; the two runs of a pair go in parallel processes (one torch
thread each), with the same seed. Held-out greedy success before RL and after each run.

    .venv/bin/python bench/minibatch_and_tis.py --warm-episodes 40 --max-minutes 10 \
        --eval-tasks 30 --set filters.max_gen_batches=30   # ~35 min on a busy 2-core machine
    .venv/bin/python bench/minibatch_and_tis.py --model tiny --steps 1 --tis-steps 1 \\
        --warm-episodes 4 --eval-tasks 2                               # does it run

Writes bench/results/minibatch_and_tis.json (or --out) and prints markdown tables.
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

from agentic_rl.backends.base import sync_weights
from agentic_rl.config.load import load_config
from agentic_rl.config.schema import Config
from agentic_rl.train.collect import DynamicSamplingError, evaluate, expert_demos
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer, set_learning_rate, start_from_policy
from agentic_rl.train.sft import train_sft

RESULTS = Path(__file__).resolve().parent / "results" / "minibatch_and_tis.json"
ONE_STEP = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2"]
PAIRS = {
    "minibatches": {
        "16 mini-batches (recipe)": [],
        "one step": ONE_STEP,
    },
    "bf16_tis": {
        "bf16 rollouts, no correction": [
            *ONE_STEP,
            "rollout.mixed_precision=bf16",
            "algo.rollout_correction=none",
        ],
        "bf16 rollouts + TIS": [
            *ONE_STEP,
            "rollout.mixed_precision=bf16",
            "algo.rollout_correction=tis",
        ],
    },
}
KEYS = (
    "reward",
    "clip_frac",
    "optimizer_steps",
    "mismatch_k3",
    "mismatch_max_abs",
    "rollout_correction_weight",
    "grad_norm",
    "gen_batches",
)


def config(args: argparse.Namespace, extra: list[str], steps: int) -> Config:
    return load_config(
        args.recipe,
        [
            f"model.name={args.model}",
            f"trainer.seed={args.seed}",
            f"trainer.steps={steps}",
            "trainer.progress=false",
            "trainer.tensorboard=false",
            f"env.num_eval_tasks={args.eval_tasks}",
            f"rollout.eval_batch_size={min(args.eval_tasks, 50)}",
            *args.set,
            *extra,
        ],
    )


def warm_start(args: argparse.Namespace) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The shared warm start and the held-out metrics of its weights (before RL)."""
    cfg = config(args, [], 1)
    setup = build(cfg)
    demos, episodes = expert_demos(setup, args.warm_episodes or cfg.warm_start.num_tasks)
    print(f"warm start on {episodes} expert episodes", flush=True)
    train_sft(
        setup.policy,
        demos,
        setup.tokenizer.pad_token_id,
        epochs=cfg.warm_start.epochs,
        lr=cfg.warm_start.lr,
        batch_size=cfg.warm_start.batch_size,
        chunk_size=cfg.model.logprob_chunk_size,
        seed=0,
    )
    sync_weights(setup.generator, setup.policy)
    return setup.policy.state_dict(), evaluate(setup)


def run(
    args: argparse.Namespace, name: str, extra: list[str], steps: int, weights_path: str
) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    cfg = config(args, extra, steps)
    setup = build(cfg)
    setup.policy.load_state_dict(torch.load(weights_path))
    sync_weights(setup.generator, setup.policy)
    start_from_policy(setup)
    optimizer = make_optimizer(setup)
    records, start, stopped = [], time.perf_counter(), ""
    for step in range(1, steps + 1):
        set_learning_rate(optimizer, cfg, step)
        try:
            m = train_step(setup, optimizer, step)
        except DynamicSamplingError as err:  # every group solved (or failed) by every sample
            stopped = f"step {step}: {err}"
            print(f"  {name}: stopped, {stopped}", flush=True)
            break
        records.append({k: m[k] for k in KEYS if k in m} | {"seconds": m["step_seconds"]})
        print(
            f"  {name} step {step}: reward {m['reward']:.3f} clip_frac "
            f"{m.get('clip_frac', 0.0):.4f} mismatch_k3 {m.get('mismatch_k3', float('nan')):.2e} "
            f"{m['step_seconds']:.0f} s",
            flush=True,
        )
        if time.perf_counter() - start > args.max_minutes * 60:
            print(f"  {name}: time budget reached after {step} steps", flush=True)
            break
    after = evaluate(setup)
    return {
        "overrides": extra,
        "steps": records,
        "rl_seconds": time.perf_counter() - start,
        "eval_success_after": after["success"],
        "stopped": stopped,
    }


def mean(steps: list[dict[str, Any]], key: str) -> float:
    values = [s[key] for s in steps if key in s]
    return statistics.mean(values) if values else float("nan")


def table(pair: str, runs: dict[str, dict[str, Any]], before: dict[str, float]) -> str:
    lines = [
        "| variant | steps | optimizer steps / step | clip_frac | mismatch_k3 | "
        "mismatch_max_abs | TIS weight | train reward, first → last third | held-out success "
        f"(before RL {before['success']:.2f}) | s / step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        steps = r["steps"]
        third = max(1, len(steps) // 3)
        first, last = mean(steps[:third], "reward"), mean(steps[-third:], "reward")
        lines.append(
            f"| {name} | {len(steps)} | {mean(steps, 'optimizer_steps'):.1f} "
            f"| {mean(steps, 'clip_frac'):.4f} | {mean(steps, 'mismatch_k3'):.2e} "
            f"| {mean(steps, 'mismatch_max_abs'):.3f} "
            f"| {mean(steps, 'rollout_correction_weight'):.3f} | {first:.3f} → {last:.3f} "
            f"| {r['eval_success_after']:.2f} | {mean(steps, 'seconds'):.1f} |"
        )
    curves = [
        f"- {name}: " + " ".join(f"{s['reward']:.2f}" for s in r["steps"])
        for name, r in runs.items()
    ]
    return "\n".join([f"**{pair}**", "", *lines, "", "Train reward per step:", *curves])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="dapo_math")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=30, help="RL steps of each (a) run")
    parser.add_argument("--tis-steps", type=int, default=20, help="RL steps of each (b) run")
    parser.add_argument("--max-minutes", type=float, default=13, help="per run, then it stops")
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--warm-episodes", type=int, default=0, help="0: the recipe's")
    parser.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
    parser.add_argument("--set", nargs="*", default=[], help="more KEY=VALUE config overrides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    bench_start = time.perf_counter()
    weights, before = warm_start(args)
    print(f"before RL: held-out success {before['success']:.3f}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "warm.pt")
        torch.save(weights, path)
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=2, mp_context=spawn) as pool:
            for pair in args.pairs:
                steps = args.steps if pair == "minibatches" else args.tis_steps
                jobs = {
                    name: pool.submit(run, args, name, extra, steps, path)
                    for name, extra in PAIRS[pair].items()
                }
                results[pair] = {name: job.result() for name, job in jobs.items()}
                print("\n" + table(pair, results[pair], before) + "\n", flush=True)
    total = time.perf_counter() - bench_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.write_text(
        json.dumps(
            {"args": settings, "before": before, "runs": results, "seconds": total}, indent=2
        )
    )
    for pair, runs in results.items():
        print("\n" + table(pair, runs, before))
    print(f"\nseed {args.seed} (one seed), {total / 60:.1f} min in all; results in {args.out}")


if __name__ == "__main__":
    main()

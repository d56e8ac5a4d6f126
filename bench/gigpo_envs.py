"""GiGPO vs GRPO on the household (TextWorld) or shop env with the bundled model, CPU scale.

One supervised warm start on scripted-expert step samples (TextWorld's walkthrough / the shop's
scripted buyer), evaluated greedily on held-out tasks; then, for each seed, GRPO and GiGPO each
start from those exact weights and run the same RL steps of the recipe (`gigpo_household` or
`gigpo_webshop`: step-wise rollouts, history window 2, groups sharing the task), seeing the
same tasks and sampling seeds; only the advantage differs (GRPO: the episode's group-normalised
return on every step; GiGPO: plus omega x the anchor-state step advantage). Greedy success
and score on the held-out tasks after each.

    .venv/bin/python bench/gigpo_envs.py --recipe gigpo_household --precompile   # games only
    .venv/bin/python bench/gigpo_envs.py --recipe gigpo_household
    .venv/bin/python bench/gigpo_envs.py --recipe gigpo_webshop

Writes bench/results/gigpo_vs_grpo_<env>_<model>.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.collect import evaluate, expert_demos
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer, set_learning_rate
from agentic_rl.train.sft import train_sft

RESULTS = Path(__file__).resolve().parent / "results"


def overrides(args: argparse.Namespace, seed: int, algo: str) -> list[str]:
    return [
        f"model.name={args.model}",
        f"algo.name={algo}",
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"optim.lr={args.lr}",
        f"env.num_train_tasks={args.train_tasks}",
        f"env.num_eval_tasks={args.eval_tasks}",
        f"rollout.group_size={args.group_size}",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        f"rollout.max_turns={args.max_turns}",
        # both algorithms normalise by the group std, so only the step term differs
        "gigpo.norm=mean_std_norm",
        f"rollout.eval_batch_size={min(args.eval_tasks, 8)}",
        "trainer.progress=false",
        *(["learner.mixed_precision=bf16", "rollout.mixed_precision=bf16"] if args.bf16 else []),
        *args.set,
    ]


def mean_of(rows: list[dict[str, float]], key: str) -> float:
    return sum(r.get(key, 0.0) for r in rows) / len(rows)


def save(
    out: Path,
    args: argparse.Namespace,
    before: dict[str, float],
    warm: dict[str, float],
    episodes: int,
    runs: list[dict[str, Any]],
    bench_start: float,
) -> float:
    """Write the results so far (after the warm start and after every run, so a run cut
    short by its time limit still leaves what it measured); returns the seconds so far."""
    total = time.perf_counter() - bench_start
    record = {
        "args": vars(args),
        "untrained": before,
        "warm_start": warm,
        "warm_start_episodes": episodes,
        "runs": runs,
        "seconds": total,
    }
    out.write_text(json.dumps(record, indent=2))
    return total


def precompile(args: argparse.Namespace) -> None:
    """Compile (and cache) every household game the bench plays."""
    from agentic_rl.envs.worlds.household import game_file

    cfg = load_config(args.recipe, overrides(args, args.seeds[0], "gigpo"))
    setup = build(cfg)
    start = time.perf_counter()
    for task in [*setup.train_tasks, *setup.eval_tasks]:
        game_file(json.loads(task.fields["layout"]), cfg.env.options.get("cache_dir", ""))
    print(f"compiled {len(setup.train_tasks) + len(setup.eval_tasks)} games", end=" ")
    print(f"in {time.perf_counter() - start:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="gigpo_household")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--train-tasks", type=int, default=40)
    parser.add_argument("--eval-tasks", type=int, default=16)
    parser.add_argument("--warm-episodes", type=int, default=32)
    parser.add_argument("--warm-epochs", type=int, default=2)
    parser.add_argument("--warm-lr", type=float, default=1e-4)
    parser.add_argument(
        "--bf16", action="store_true", help="bf16 autocast: warm start, rollouts and updates"
    )
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides (both arms)")
    parser.add_argument("--out", default="", help="results JSON (default bench/results/...)")
    parser.add_argument("--precompile", action="store_true", help="compile the games, exit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.precompile:
        precompile(args)
        return
    bench_start = time.perf_counter()
    cfg = load_config(args.recipe, overrides(args, args.seeds[0], "gigpo"))
    setup = build(cfg)
    before = evaluate(setup)
    demos, episodes = expert_demos(setup, args.warm_episodes)
    train_sft(setup.policy, demos, setup.tokenizer.pad_token_id, epochs=args.warm_epochs,
              lr=args.warm_lr, batch_size=8, micro_batch_size=2, seed=args.seeds[0],
              mixed_precision="bf16" if args.bf16 else "no")  # fmt: skip
    warm = evaluate(setup)
    weights = copy.deepcopy(setup.policy.state_dict())
    print(f"untrained {before}\nwarm start ({episodes} expert episodes) {warm}", flush=True)
    runs: list[dict[str, Any]] = []
    model = args.model.replace("smollm2-", "")
    out = Path(args.out) if args.out else RESULTS / f"gigpo_vs_grpo_{cfg.env.name}_{model}.json"
    out.parent.mkdir(exist_ok=True)
    total = save(out, args, before, warm, episodes, runs, bench_start)
    for seed in args.seeds:
        for algo in ("grpo", "gigpo"):
            cfg = load_config(args.recipe, overrides(args, seed, algo))
            run = build(cfg)
            run.policy.load_state_dict(weights)
            if run.reference is not None:
                run.reference.load_state_dict(weights)
            optimizer = make_optimizer(run)
            rows, start = [], time.perf_counter()
            for step in range(1, args.steps + 1):
                set_learning_rate(optimizer, cfg, step)
                rows.append(train_step(run, optimizer, step))
                print(f"[{algo} seed {seed}] step {step}: success {rows[-1].get('success', 0):.2f} "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)  # fmt: skip
            seconds = time.perf_counter() - start
            after = evaluate(run)
            runs.append(
                {
                    "seed": seed,
                    "algo": algo,
                    "eval_after": after,
                    "train_success": mean_of(rows, "success"),
                    "train_reward": mean_of(rows, "reward"),
                    "step_adv_nonzero": mean_of(rows, "step_adv_nonzero"),
                    "shared_step_groups": mean_of(rows, "shared_step_groups"),
                    "rl_seconds": seconds,
                }
            )
            print(json.dumps(runs[-1]), flush=True)
            total = save(out, args, before, warm, episodes, runs, bench_start)
    print("\n| algorithm | eval success (reward) after RL | train success | step adv != 0 |")
    print("|---|---|---|---|")
    print(f"| warm start | {warm['success']:.3f} ({warm['reward']:.3f}) | | |")
    for r in runs:
        a = r["eval_after"]
        print(
            f"| {r['algo']} (seed {r['seed']}) | {a['success']:.3f} ({a['reward']:.3f}) "
            f"| {r['train_success']:.3f} | {r['step_adv_nonzero']:.2f} |"
        )
    print(f"\ntotal {total:.0f} s -> {out}")


if __name__ == "__main__":
    main()

"""Turn-level credit against episode-level GRPO on a recipe with step rewards: MT-GRPO and a
turn-level critic (Turn-PPO) vs GRPO, same warm start, same RL steps, 3 seeds.

The recipe is `stepsearch` by default (generated two-hop questions, BM25 search; every search
turn earns StepSearch's step reward 0.6 (IG - RP), the answer turn the outcome F1 + 0.618 x key
match, -1 without an answer); `--recipe mt_grpo_gridworld` runs the same arms on the grid world,
where every move earns its progress toward the goal (+-0.1) and arrival 1, at a fraction of
StepSearch's step time. Each arm is the recipe with one change, the advantage estimator (and
for one arm the policy loss):

  * grpo      episode-level GRPO: every token gets the group-normalised episode reward
  * mt_grpo   GRPO's outcome advantage + algo.turn_advantage_coef (1.0) x the group-normalised
              step reward of each search turn before the answer, per turn index (MT-GRPO)
  * mt_grpo_outcome  (not run by default) mt_grpo whose outcome advantage normalises the last
              turn's reward alone (algo.mt_grpo_outcome=last_turn, the paper's outcome-only
              reward), not the episode reward that also holds the turn rewards
  * turn_ppo  a turn-level critic (the recipe's separate critic, read at each turn's first
              token), GAE over turns with the recipe's gamma = lambda = 1 (Turn-PPO)
  * turn_ppo_turn_ratio  (not run by default) turn_ppo with the turn-level ratio and clip
              (algo.policy_loss=turn: one ratio per turn, ST-PPO's turn importance sampling)
  * ppo       (not run by default) the recipe as shipped: token-level PPO + GAE

grpo and mt_grpo drop the recipe's critic settings (they have no critic). Every arm plays the
same B tasks x G episodes a step (G >= 2 for the group estimators) and takes the recipe's
optimizer steps a step (its `algo.ppo_mini_batches`: one for stepsearch, two for
mt_grpo_gridworld; the file records them), for --steps steps: the budget is in optimizer
steps, so a loaded machine changes the time, not the result. One supervised warm start on the
scripted expert (the recipe's: 32 expert episodes, lr 1e-4) is shared by every arm and seed;
the RL seeds differ in sampling and task order. Held-out success is greedy, on the recipe's
held-out questions, after the warm start and after RL. The runs go one after another in this
process (the 135M model and a separate critic do not fit twice next to other jobs); the
results file is written after each run and a rerun skips the runs it holds.

    .venv/bin/python bench/turn_credit.py                                   # 135M, 3 seeds
    .venv/bin/python bench/turn_credit.py --arms grpo mt_grpo --seeds 0 --steps 4   # a look
    .venv/bin/python bench/turn_credit.py --recipe mt_grpo_gridworld --group-size 8 \
        --out bench/results/turn_credit_gridworld.json                 # the grid world

Writes bench/results/turn_credit.json (per arm and seed: held-out success and reward after
RL, per-step train reward / success / turn_adv_nonzero / step seconds; per arm, held-out
success over its seeds under `summary`) and prints a markdown table of means and ranges over
seeds.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agentic_rl.backends.base import sync_weights
from agentic_rl.config.load import load_config
from agentic_rl.config.schema import Config
from agentic_rl.train.collect import evaluate
from agentic_rl.train.loop import train_step, warm_start
from agentic_rl.train.setup import build, make_optimizer, set_learning_rate, start_from_policy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "turn_credit.json"
CRITIC_KEYS = ("gamma", "lam", "value_clip", "value_coef", "critic", "critic_lr")
"""The recipe's PPO critic settings: kept for the arms with a critic, dropped for the others
(they would do nothing there, which the config refuses)."""
ARMS: dict[str, dict[str, Any]] = {
    "grpo": {"name": "grpo"},
    "mt_grpo": {"name": "mt_grpo", "turn_advantage_coef": 1.0},
    # MT-GRPO with the outcome-only reward: A^O of the last turn's reward, not the episode's
    "mt_grpo_outcome": {
        "name": "mt_grpo",
        "turn_advantage_coef": 1.0,
        "mt_grpo_outcome": "last_turn",
    },
    "turn_ppo": {"name": "turn_ppo"},
    # Turn-PPO with its turn-level ratio and clip as well (ST-PPO's turn importance sampling)
    "turn_ppo_turn_ratio": {"name": "turn_ppo", "policy_loss": "turn"},
    "ppo": {"name": "ppo"},
}
CRITIC_ARMS = ("turn_ppo", "turn_ppo_turn_ratio", "ppo")
TRAIN_KEYS = (
    "reward",
    "success",
    "tool_calls_per_episode",
    "turn_adv_nonzero",
    "nonzero_adv_fraction",
    "value_loss",
    "optimizer_steps",
    "step_seconds",
)


class _Quiet:
    """A RunLogger stand-in for the warm start: nothing is written."""

    def log(self, *args: Any, **kwargs: Any) -> None:
        pass


def arm_recipe(args: argparse.Namespace, arm: str, directory: Path) -> Path:
    """The recipe's YAML with the arm's estimator (and without critic settings it cannot use),
    written to `directory`."""
    data = yaml.safe_load((ROOT / "recipes" / f"{args.recipe}.yaml").read_text())
    algo = data.setdefault("algo", {})
    if arm not in CRITIC_ARMS:
        for key in CRITIC_KEYS:
            algo.pop(key, None)
    algo.update(ARMS[arm])
    path = directory / f"{args.recipe}_{arm}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def arm_config(args: argparse.Namespace, arm: str, seed: int, directory: Path) -> Config:
    overrides = [
        f"model.name={args.model}",
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        "trainer.max_minutes=0",
        "trainer.progress=false",
        f"rollout.tasks_per_step={args.tasks_per_step}",
        f"rollout.group_size={args.group_size}",
        f"env.num_eval_tasks={args.eval_tasks}",
        f"rollout.eval_batch_size={min(args.eval_tasks, 50)}",
        f"warm_start.num_tasks={args.warm_tasks}",
        *args.overrides,
    ]
    return load_config(arm_recipe(args, arm, directory), overrides, smoke=args.smoke)


def shared_warm_start(args: argparse.Namespace, directory: Path) -> tuple[dict, dict[str, float]]:
    """The recipe's supervised warm start on its scripted expert, once (seed 0), and the
    held-out evaluation after it."""
    setup = build(arm_config(args, "grpo", 0, directory))
    warm_start(setup, _Quiet())  # type: ignore[arg-type]
    sync_weights(setup.generator, setup.policy)
    return copy.deepcopy(setup.policy.state_dict()), evaluate(setup)


def rl_run(
    args: argparse.Namespace, arm: str, seed: int, weights: dict, directory: Path
) -> dict[str, Any]:
    """One arm, one seed: from the warm-started weights, `--steps` RL steps, then the held-out
    evaluation."""
    torch.manual_seed(seed)
    cfg = arm_config(args, arm, seed, directory)
    setup = build(cfg)
    setup.policy.load_state_dict(weights)
    start_from_policy(setup)  # the reference and a separate critic's trunk from these weights
    sync_weights(setup.generator, setup.policy)
    optimizer = make_optimizer(setup)
    train: list[dict[str, float]] = []
    start = time.perf_counter()
    for step in range(1, cfg.trainer.steps + 1):
        set_learning_rate(optimizer, cfg, step)
        t0 = time.perf_counter()
        metrics = train_step(setup, optimizer, step)
        metrics["step_seconds"] = time.perf_counter() - t0
        train.append({"step": step, **{k: metrics[k] for k in TRAIN_KEYS if k in metrics}})
        print(f"  [{arm} seed {seed}] step {step}: {json.dumps(train[-1])}", flush=True)
    seconds = time.perf_counter() - start
    after = evaluate(setup)
    return {
        "eval_success": after["success"],
        "eval_reward": after["reward"],
        "eval_tool_calls": after["tool_calls_per_episode"],
        "rl_seconds": seconds,
        "optimizer_steps": sum(row.get("optimizer_steps", 0.0) for row in train),
        "train": train,
    }


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]"


def table(results: dict[str, dict[str, Any]], warm: dict[str, float] | None) -> str:
    head = f"warm start (shared): held-out success {warm['success']:.3f}\n\n" if warm else ""
    lines = [
        "| arm | seeds | held-out success after RL, mean [min, max] | held-out reward "
        "| train reward, last third | turn_adv_nonzero |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in results.items():
        runs = list(seeds.values())

        def last_third(run: dict[str, Any], key: str) -> float | None:
            rows = [r[key] for r in run["train"] if key in r]
            tail = rows[-max(1, len(rows) // 3) :]
            return statistics.fmean(tail) if tail else None

        tails = [t for t in (last_third(r, "reward") for r in runs) if t is not None]
        turns = [t for t in (last_third(r, "turn_adv_nonzero") for r in runs) if t is not None]
        lines.append(
            f"| {arm} | {len(runs)} | {spread([r['eval_success'] for r in runs])} | "
            f"{spread([r['eval_reward'] for r in runs])} | {spread(tails)} | {spread(turns)} |"
        )
    return head + "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="stepsearch")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument(
        "--arms", nargs="+", default=["grpo", "mt_grpo", "turn_ppo"], choices=list(ARMS)
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=10, help="RL steps = optimizer steps")
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--warm-tasks", type=int, default=32, help="expert episodes")
    parser.add_argument("--smoke", action="store_true", help="the recipe's smoke settings")
    parser.add_argument("--overrides", nargs="*", default=[], help="added to every run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    data: dict[str, Any] = {}
    if args.out.is_file():  # resume: keep the arms and seeds already measured
        data = json.loads(args.out.read_text())
    results: dict[str, dict[str, Any]] = data.get("results", {})
    todo = [(s, a) for s in args.seeds for a in args.arms if str(s) not in results.get(a, {})]
    warm = data.get("warm_start")
    with tempfile.TemporaryDirectory(prefix="turn-credit-") as tmp:
        directory = Path(tmp)
        if todo:
            t0 = time.perf_counter()
            weights, fresh = shared_warm_start(args, directory)
            print(f"warm start: held-out success {fresh['success']:.3f}", flush=True)
            check_same_warm_start(warm, fresh, args.out)
            warm = {**fresh, "seconds": time.perf_counter() - t0}
        for seed, arm in todo:
            print(f"[{arm} seed {seed}]", flush=True)
            results.setdefault(arm, {})[str(seed)] = rl_run(args, arm, seed, weights, directory)
            command = " ".join(["bench/turn_credit.py", *(argv or sys.argv[1:])])
            earlier = data.get("commands", [data["command"]] if "command" in data else [])
            data = {
                "command": earlier[0] if earlier else command,
                "commands": earlier if command in earlier else [*earlier, command],
                "recipe": args.recipe,
                "model": args.model,
                "steps": args.steps,
                "optimizer_steps_per_step": statistics.fmean(
                    row["optimizer_steps"]
                    for seeds in results.values()
                    for run in seeds.values()
                    for row in run["train"]
                    if "optimizer_steps" in row
                ),
                "tasks_per_step": args.tasks_per_step,
                "group_size": args.group_size,
                "eval_tasks": args.eval_tasks,
                "arms": {a: ARMS[a] for a in results},
                "machine": {
                    "platform": platform.platform(),
                    "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(),
                },
                "warm_start": warm,
                "results": results,
            }
            save(data, args.out)
    if results and "summary" not in data:  # a file written before summaries were kept
        save(data, args.out)
    print(table(results, warm))
    return data


def check_same_warm_start(
    stored: dict[str, float] | None, fresh: dict[str, float], out: Path
) -> None:
    """A resumed file's arms must share one warm start: the one just made must evaluate as the
    stored one did (same held-out success and reward), else its new arms would be compared
    against arms that started elsewhere (another machine, torch or code)."""
    if stored is None:
        return
    for key in ("success", "reward"):
        if key in stored and abs(stored[key] - fresh[key]) > 1e-9:
            raise SystemExit(
                f"{out} holds arms from a warm start with held-out {key} {stored[key]:.4f}; "
                f"this one gives {fresh[key]:.4f}, so the arms would not share a start: write "
                "to a new --out (or rerun every arm there)"
            )


def save(data: dict[str, Any], out: Path) -> None:
    """Write the results with each arm's held-out success over its seeds (`summary`)."""
    data["summary"] = {
        arm: {
            "seeds": len(seeds),
            "eval_success": {
                "mean": statistics.fmean(run["eval_success"] for run in seeds.values()),
                "min": min(run["eval_success"] for run in seeds.values()),
                "max": max(run["eval_success"] for run in seeds.values()),
            },
        }
        for arm, seeds in data["results"].items()
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()

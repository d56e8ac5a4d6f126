"""Lockstep against continuous multi-turn rollouts (rollout.env_workers), A/B interleaved.

Two parts, both on one recipe (default: `search_qa_grpo`, the default multi-turn recipe):

* train: whole `agentic-rl train` runs, one process per (seed, arm), the arms interleaved seed
  by seed (bench/arms.py): `lockstep` (rollout.env_workers=0, the recipe as shipped) and
  `continuous` (rollout.env_workers=--workers). Per RL step: step and rollout seconds, reward
  and success, so the table shows the step time and the learning per step side by side.
  Budgeted in RL steps (time limits off).
* rollout: in this process, one policy, the rollouts of `--repeats` training batches timed per
  arm (interleaved repeat by repeat), with a simulated tool latency: each env step sleeps
  `--latency-s` seconds with probability `--slow-fraction` (seeded by task, group and turn, so
  both arms meet the same slow steps). The recipe's own tools run in process in milliseconds,
  where continuous scheduling has nothing to overlap; this part shows what it buys when steps
  are slow (sandboxes, HTTP tools, browsers). It also plays the held-out tasks greedily in both
  schedules and counts the episodes whose tokens differ (greedy: the same up to float
  rounding that changes with a batch's make-up). Per arm it also counts the prompt tokens
  prefilled (after next-turn KV reuse) and, sampling being seeded per episode and turn, the
  sampled training samples whose tokens differ between the arms for the same seeds.

    .venv/bin/python bench/continuous_rollouts.py                       # both parts
    .venv/bin/python bench/continuous_rollouts.py --part rollout --latency-s 1.0
    .venv/bin/python bench/continuous_rollouts.py --smoke               # tiny model, a look

Writes bench/results/continuous_rollouts.json (--smoke: continuous_rollouts_smoke.json) and
prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import run_arms  # noqa: E402  (bench/ is scripts, not a package)

RESULTS = Path(__file__).resolve().parent / "results" / "continuous_rollouts.json"
TRAIN_KEYS = ("reward", "success", "step_seconds", "rollout_seconds")
SMOKE = [
    "model.name=tiny",
    "warm_start.num_tasks=0",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=8",
    "env.num_eval_tasks=2",
]


def arms(workers: int) -> dict[str, list[str]]:
    return {"lockstep": ["rollout.env_workers=0"], "continuous": [f"rollout.env_workers={workers}"]}


class Delayed:
    """An env whose step sleeps `latency_s` with probability `fraction`, drawn from (task,
    reset seed, step index), so every schedule meets the same slow steps. Everything else is
    the wrapped env's."""

    def __init__(self, env: Any, latency_s: float, fraction: float) -> None:
        self.env, self.latency_s, self.fraction = env, latency_s, fraction
        self.key, self.steps = "", 0

    def __getattr__(self, name: str) -> Any:
        if name == "start_step":  # every step goes through `step`, and its sleep
            raise AttributeError(name)
        return getattr(self.env, name)

    def reset(self, task: Any, seed: int) -> Any:
        self.key, self.steps = f"{task.task_id}:{seed}", 0
        return self.env.reset(task, seed)

    def step(self, action: Any) -> Any:
        self.steps += 1
        if random.Random(f"{self.key}:{self.steps}").random() < self.fraction:
            time.sleep(self.latency_s)
        return self.env.step(action)


class DelayedEnvs:
    """Stands in for the Setup's env pool (`make_envs(..., pool=)`): fresh recipe envs, each
    wrapped in `Delayed`."""

    def __init__(self, cfg: Any, latency_s: float, fraction: float) -> None:
        self.cfg, self.latency_s, self.fraction = cfg, latency_s, fraction

    def make(self, n: int, progress: float | None = None) -> list[Any]:
        from agentic_rl.envs.from_config import make_envs

        made = make_envs(self.cfg, n, progress)
        return [Delayed(env, self.latency_s, self.fraction) for env in made]


def rollout_part(args: argparse.Namespace) -> dict[str, Any]:
    """Rollout seconds per arm with the simulated latency, and greedy token agreement."""
    from agentic_rl.backends.base import release_for_update
    from agentic_rl.config.load import load_config
    from agentic_rl.train import collect
    from agentic_rl.train.setup import build

    overrides = [*(SMOKE if args.smoke else []), *args.overrides]
    cfg = load_config(args.recipe, overrides, smoke=args.smoke)
    setup = build(cfg)
    setup.env_pool = DelayedEnvs(cfg, args.latency_s, args.slow_fraction)
    workers = {"lockstep": 0, "continuous": args.workers}
    seconds: dict[str, list[float]] = {arm: [] for arm in workers}
    tokens: dict[str, int] = {arm: 0 for arm in workers}
    prefill: dict[str, int] = {arm: 0 for arm in workers}  # prompt tokens run (after KV reuse)
    sampled_differ, sampled_total = 0, 0
    for repeat in range(args.repeats):
        tasks = random.Random(repeat).sample(setup.train_tasks, cfg.rollout.tasks_per_step)
        sampled: dict[str, list[list[int]]] = {}
        for arm, k in workers.items():
            cfg.rollout.env_workers = k
            release_for_update(setup.generator)  # no KV kept from the other arm's episodes
            before = getattr(setup.generator, "prompt_tokens", 0)
            start = time.perf_counter()
            played = collect.rollout(setup, tasks, cfg.rollout.group_size, seed=repeat, step=1)
            seconds[arm].append(time.perf_counter() - start)
            prefill[arm] += getattr(setup.generator, "prompt_tokens", 0) - before
            tokens[arm] += sum(sum(s.loss_mask) for ep in played.samples for s in ep)
            sampled[arm] = [s.token_ids for ep in played.samples for s in ep]
            print(f"[rollout {arm} repeat {repeat}] {seconds[arm][-1]:.1f} s", flush=True)
        # per-episode seeded sampling: the same seed gives the same samples in both schedules
        # (up to float rounding that changes with a batch's make-up)
        pairs = list(zip(sampled["lockstep"], sampled["continuous"], strict=False))
        sampled_differ += sum(a != b for a, b in pairs)
        sampled_total += len(pairs)
    greedy = {}
    for arm, k in workers.items():
        cfg.rollout.env_workers = k
        greedy[arm] = [ep[0].token_ids for ep in collect.eval_episodes(setup)]
    differ = sum(a != b for a, b in zip(greedy["lockstep"], greedy["continuous"], strict=True))
    return {
        "latency_s": args.latency_s,
        "slow_fraction": args.slow_fraction,
        "workers": args.workers,
        "seconds": seconds,
        "generated_tokens": tokens,
        "prefill_tokens": prefill,
        "sampled_samples": sampled_total,
        "sampled_samples_differing": sampled_differ,
        "greedy_episodes": len(greedy["lockstep"]),
        "greedy_episodes_differing": differ,
    }


def mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def summary(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per arm, what the docs table shows: mean step / rollout seconds, reward and success per
    RL step (train part); mean rollout seconds with the simulated latency, generated and
    prefilled tokens (rollout part). A part not run leaves its keys out."""
    out: dict[str, dict[str, Any]] = {}
    for arm, seeds in (record.get("train") or {}).items():
        rows = [r for run in seeds.values() for r in run["train"]]
        out[arm] = {k: mean([r[k] for r in rows if k in r]) for k in TRAIN_KEYS}
    part = record.get("rollout")
    if part:
        for arm, values in part["seconds"].items():
            out.setdefault(arm, {}).update(
                latency_rollout_seconds=mean(values),
                generated_tokens=part["generated_tokens"][arm],
                prefill_tokens=part.get("prefill_tokens", {}).get(arm),
            )
    return out


def table(record: dict[str, Any]) -> str:
    """Markdown: per arm, the mean step / rollout seconds and reward per RL step (train part)
    and the mean rollout seconds with the simulated latency (rollout part)."""
    lines = []
    train = record.get("train") or {}
    if train:
        lines += [
            "| arm | step s | rollout s | reward / step | success / step |",
            "|---|---|---|---|---|",
        ]
        for arm, seeds in train.items():
            rows = [r for run in seeds.values() for r in run["train"]]
            cells = [mean([r[k] for r in rows if k in r]) for k in TRAIN_KEYS]
            reward, success, step_s, rollout_s = (_fmt(c) for c in cells)
            lines.append(f"| {arm} | {step_s} | {rollout_s} | {reward} | {success} |")
    part = record.get("rollout")
    if part:
        lines += [
            "",
            f"Rollout with {part['slow_fraction']:.0%} of steps slowed by {part['latency_s']} s "
            f"({part['workers']} workers); greedy episodes differing: "
            f"{part['greedy_episodes_differing']} of {part['greedy_episodes']}; sampled "
            f"samples differing (same seeds): {part.get('sampled_samples_differing', '-')} of "
            f"{part.get('sampled_samples', '-')}",
            "",
            "| arm | rollout s (mean) | generated tokens | prefill tokens |",
            "|---|---|---|---|",
        ]
        for arm, values in part["seconds"].items():
            prefilled = part.get("prefill_tokens", {}).get(arm, "-")
            lines.append(
                f"| {arm} | {_fmt(mean(values))} | {part['generated_tokens'][arm]} | {prefilled} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="search_qa_grpo")
    parser.add_argument("--part", choices=["train", "rollout", "both"], default="both")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency-s", type=float, default=1.0)
    parser.add_argument("--slow-fraction", type=float, default=0.25)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--overrides", nargs="*", default=[], help="added to every run")
    parser.add_argument("--smoke", action="store_true", help="the tiny model, 1 step, a look")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.repeats = 1, 1
    out = args.out or RESULTS.with_name(
        "continuous_rollouts_smoke.json" if args.smoke else RESULTS.name
    )
    record: dict[str, Any] = {
        "command": " ".join(["bench/continuous_rollouts.py", *(argv or sys.argv[1:])]),
        "recipe": args.recipe,
        "machine": platform.platform(),
        "processor": platform.processor(),
    }
    if args.part in ("train", "both"):
        runs = out.with_name(out.stem + "_train_runs.json")  # resumable: bench/arms.py
        if args.smoke:
            runs.unlink(missing_ok=True)  # a look starts afresh
        train_args = argparse.Namespace(
            recipe=args.recipe,
            arms=["lockstep", "continuous"],
            seeds=args.seeds,
            steps=args.steps,
            eval_every=10_000,  # no held-out evaluations: step time and training reward
            overrides=[*(SMOKE if args.smoke else []), *args.overrides],
            out=runs,
        )
        record["train"] = run_arms(train_args, arms(args.workers), TRAIN_KEYS, {})
        record["steps"] = args.steps
    if args.part in ("rollout", "both"):
        record["rollout"] = rollout_part(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    record["summary"] = summary(record)
    out.write_text(json.dumps(record, indent=1))
    print(table(record))
    return record


if __name__ == "__main__":
    main()

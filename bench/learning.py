"""Does RL itself add? One family's learning run: three seeds, budgeted in optimizer steps.

For a family (the file key: `search`, `code`, `worlds`, ...) this trains the family's chosen
recipe as `agentic-rl train` does, once per seed, with a fixed number of RL steps and no time
budget (a loaded machine changes a run's time, never its result), evaluating greedily on the
held-out tasks before training, after the warm start, every `--eval-every` RL steps and after
RL. It writes `bench/results/learning/KEY.json`:

    {"recipe": ..., "metric": "success", "held_out_tasks": N, "rl_steps": K,
     "seeds": [{"seed": S, "before": x, "warm_start": y, "after_rl": z, "rl_steps": K,
                "curve": [[step, value], ...], "command": "...", "code_commit": "...",
                "wall_seconds": ..., "step_metrics": {"entropy": {"first": ..., "last": ...},
                ...}}, ...],
     "rl_gain": {"mean": ..., "min": ..., "max": ...}, "machine": {...}}

with the metric as a fraction in [0, 1], and a picture of the held-out curves (mean and band
over seeds) beside it, `KEY.png`. Seeds already in the file are kept (a killed run resumes at the
next seed; `--force` reruns). One model run at a time: never start two.

A multi-stage recipe (e.g. `vln_r1`: an SFT stage, then an RL stage from its weights) runs as it
ships; the RL budget and curve are its last stage's (`LAST:trainer.steps=K`), "before" is the
first stage's untrained evaluation and "warm_start" the previous stage's final one.

    .venv/bin/python bench/learning.py search             # the family's recipe and budget below
    .venv/bin/python bench/learning.py search --recipe search_qa_grpo --steps 60 --eval-every 20
    .venv/bin/python bench/learning.py search --plot      # redraw KEY.png from KEY.json
    .venv/bin/python bench/learning.py gui --keep-runs runs/learning-gui   # keep checkpoints
    # seeds side by side (a GPU machine: --set trainer.device=cuda), then one file of all three
    .venv/bin/python bench/learning.py memory --seeds 0 --results /tmp/s0 &   # ... 1, 2
    .venv/bin/python bench/learning.py memory --merge /tmp/s0 /tmp/s1 /tmp/s2
    # a machine lent for a limited time: stop each seed's run in time, keeping its curve so far
    .venv/bin/python bench/learning.py memory --seeds 0 --run-limit-s 500 --results /tmp/s0

A run stopped by `--run-limit-s` is kept under "stopped" in KEY.json (its curve and the RL steps
it logged), never among the seeds or in the RL gain; the family table counts it as stopped early,
and a later run of that seed replaces it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arms import plot_curves  # noqa: E402  (bench/ is scripts, not a package)
from recipe_runs import RunStopped, machine, metric_records, run_one, step_records  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "learning"


class Family(NamedTuple):
    recipe: str
    steps: int
    eval_every: int
    why: str
    overrides: tuple[str, ...] = ()
    """The calibration (e.g. a smaller warm start that leaves RL room), applied before --set."""


# The recipe each family is shown with, its RL budget in optimizer steps, and why it was chosen
# (the evidence so far; a family whose choice is not yet calibrated says so).
FAMILIES: dict[str, Family] = {
    "search": Family(
        "search_qa_grpo",
        60,
        20,
        "the default recipe as it ships; twice its learning rate (1e-5) was probed on seeds 0"
        " and 1 and ended lower on average after 60 steps, one seed falling well below the"
        " shipped rate's (results/learning/probes/search_lr_1e-5.json)",
    ),
    "ppo_search": Family(
        "search_r1",
        40,
        10,
        "PPO + critic on two-hop QA, not yet calibrated: three seeds on a shared GPU were stopped"
        " at 15-17 of 30 steps, held-out success after 10 steps above the warm start in every"
        " seed and training reward still rising; its 32-episode warm start leaves 3-9%"
        " (results/learning/probes/h200_stopped_ppo_search_worlds.json)",
    ),
    "code": Family(
        "retool", 30, 10, "the recipe as it ships: its 256-episode warm start leaves ~27%"
    ),
    "math": Family(
        "dapo_math",
        30,
        10,
        "calibrated: a 48-episode warm start leaves RL room (the recipe's 200 solve nearly all);"
        " 40 rollout batches a step, because once RL solves most problems 10 batches of 2 tasks"
        " no longer find 2 groups with mixed rewards (a 30-step seed stopped at step 21)",
        ("warm_start.num_tasks=48", "filters.max_gen_batches=40"),
    ),
    "worlds": Family(
        "gigpo_gridworld",
        30,
        10,
        "calibrated: GiGPO on the grid world, 4 grids x 8 samples a step (the recipe: 2 x 8) after"
        " a smaller, gentler warm start (16 BFS-expert episodes at lr 3e-5; the recipe: 32 at"
        " 1e-4) that teaches the move format and leaves most grids to RL. As it ships, the"
        " warm-started policy samples almost deterministically, every group of 8 ends alike by"
        " the last quarter of the steps and held-out success stays flat over 30 steps"
        " (results/learning/probes/worlds_gridworld_as_shipped.json); with 32 episodes at lr 3e-5"
        " three seeds started higher and ended at the same level as here"
        " (results/learning/probes/worlds_warm32.json): RL stops there from either warm start, as"
        " the groups go uniform again",
        ("warm_start.lr=3e-5", "warm_start.num_tasks=16", "rollout.tasks_per_step=4"),
    ),
    "memory": Family(
        "memagent",
        20,
        5,
        "calibrated: the recipe's 32-episode warm start leaves 25-46% of 100 held-out questions"
        " exact, room for RL; 4 questions x 4 samples a step (the recipe: 2 x 4) at lr 5e-6 (the"
        " recipe: 2e-6), sampling and learning in bf16 autocast to halve a CPU step; in 20 steps"
        " held-out success rose in every seed, still rising at step 20 in two",
        (
            "env.num_eval_tasks=100",
            "rollout.tasks_per_step=4",
            "optim.lr=5e-6",
            "rollout.mixed_precision=bf16",
            "learner.mixed_precision=bf16",
        ),
    ),
    "gui": Family(
        "ui_tars",
        40,
        10,
        "calibrated: the recipe's SFT, failure DPO and GRPO on the three of its five MiniWoB++"
        " tasks that the first two stages leave unsolved (click-button, click-link,"
        " click-checkboxes), with the warm start's 8 episodes a task kept (24), 8 samples a"
        " page, lr 1e-5 and the success reward (+1 solved, -1 otherwise). As it ships, failure"
        " DPO solves enter-text and focus-text, half the GRPO groups have no reward variance and"
        " held-out success stayed flat over 40 steps (results/learning/probes/gui_as_shipped.json)."
        " On MiniWoB's raw reward the three-task family fell twice: 34% -> 31% at lr 5e-6 with an"
        " unfinished episode scored 0, so stalling paid (results/learning/probes/"
        "gui_three_tasks.json), and 36% -> 32% at lr 1e-5 with it scored -1, where click-button"
        " rose and click-checkboxes fell 26% -> 3%: the policy learned to check fewer wrong boxes,"
        " which click-checkboxes' partial credit pays, instead of solving pages"
        " (results/learning/probes/gui_raw_reward_lr1e-5.json). Not met with the success reward"
        " either: seed 0 went 31% (after failure DPO) -> 38% (step 10) -> 28% (step 40) and"
        " click-checkboxes fell 29% -> 3% again, so partial credit is not the whole cause"
        " (results/learning/probes/gui_success_reward_lr1e-5.json). Next: a per-task look at"
        " the checkbox episodes under the success reward, and a per-task curriculum",
        (
            "env.options.tasks=click-button,click-link,click-checkboxes",
            "env.options.reward=success",
            "sft:warm_start.num_tasks=24",
            "rollout.group_size=8",
            "optim.lr=1e-5",
        ),
    ),
    "embodied": Family(
        "vln_r1",
        20,
        10,
        "calibrated: the recipe's SFT stage, then GRPO on 4 houses x 8"
        " samples a step (the recipe: 2 x 8) at lr 1e-5 (the recipe: 5e-6), 100 held-out houses,"
        " with the episode reward that counts the chunks against the route"
        " (episode_reward=route_mean, now the recipe's). Two seeds gain well, the seed whose warm"
        " start already solves 31% stays there (its training success is as flat), so the mean"
        " passes +10 and one seed is not positive. With the earlier mean over the chunks played,"
        " 30 steps at the recipe's settings left three seeds at +12 / -1 / -7: the policy learned"
        " to stop after its first chunk (1.1 chunks an episode), which that reward paid as well as"
        " walking on (results/learning/probes/embodied_mean_reward.json); with route_mean the"
        " episodes walk on (2.3-2.6 chunks). With a 60-episode warm start the flat seed 2"
        " started at 9% and rose to 17% at step 20, still rising"
        " (results/learning/probes/embodied_warm60_seed2.json). Next: all three seeds with that"
        " smaller warm start",
        ("env.num_eval_tasks=100", "optim.lr=1e-5", "rollout.tasks_per_step=4"),
    ),
    "perception": Family("vprl", 20, 5, "3 GRPO steps raised valid moves 1.3 -> 2.3 a plan"),
    "self_improvement": Family(
        "absolute_zero",
        20,
        5,
        "the recipe as it ships, held out on 120 distinct solve tasks over 30 programs; three"
        " seeds do not meet the bar: held-out success stays within a few points of the warm"
        " start, training success is as flat and no token is clipped, so at 24 episodes and one"
        " update of lr 5e-6 a step, 20 steps barely move the policy; on the earlier held-out set"
        " (31 distinct tasks) 4x the learning rate ended where it started"
        " (results/learning/probes/self_improvement_lr.json). Next: more solve episodes a step"
        " (rollout.tasks_per_step) and more steps, which want a GPU",
    ),
}


def recipe_stages(recipe: str) -> list[str]:
    """The names of a recipe's stages, in order ([] for a one-stage recipe)."""
    import yaml

    from agentic_rl.config.load import resolve_recipe

    data = yaml.safe_load(resolve_recipe(recipe).read_text()) or {}
    return [stage["name"] for stage in data.get("stages") or []]


def flat_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A run's summary as one RL run's: for a multi-stage run, `before` from its first stage,
    `warm_start` the previous stage's final evaluation (where the RL stage starts), `after`
    and `eval_tasks` from the last (the RL stage)."""
    if "stages" not in summary:
        return summary
    stages = list(summary["stages"].values())
    if len(stages) < 2:
        raise ValueError(f"a multi-stage summary with {len(stages)} stage(s): {summary}")
    flat = {k: v for k, v in stages[-1].items() if k not in ("before", "warm_start")}
    if "before" in stages[0]:
        flat["before"] = stages[0]["before"]
    flat["warm_start"] = stages[-2]["after"]
    return flat


def eval_curve(run_dir: Path, metric: str) -> list[list[float]]:
    """[[rl_step, metric], ...] from the run's held-out evaluations (metrics.jsonl), the
    warm-started model at step 0 (the untrained one where the recipe has no warm start).
    For a multi-stage run, `run_dir` is its RL stage's directory (step 0 is added by the
    caller from the previous stage)."""
    curve: dict[int, float] = {}
    for path in sorted(run_dir.rglob("metrics.jsonl")):
        for record in metric_records(path):
            for prefix in ("eval_before", "eval_warm_start", "eval"):
                value = record.get(f"{prefix}/{metric}")
                if isinstance(value, int | float):  # later prefixes overwrite step 0's before
                    curve[int(record["step"])] = float(value)
    return [[step, curve[step]] for step in sorted(curve)]


def code_commit() -> str:
    """The commit of the code a run trains with (ROOT's HEAD), "+dirty" where src/ or recipes/
    differ from it: a later change (e.g. to the sampler) changes a rerun's numbers, so a seed
    row says which code made it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short=10", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--", "src", "recipes") else "")


def seed_row(
    run: dict[str, Any],
    summary: dict[str, Any],
    curve: list[list[float]],
    metric: str,
    cmd: str,
    commit: str,
) -> dict:
    """One seed's row of KEY.json; `summary` is the run's as one RL run's (flat_summary)."""
    return {
        "seed": run["seed"],
        "before": summary["before"][metric] if "before" in summary else None,
        "warm_start": summary["warm_start"][metric] if "warm_start" in summary else None,
        "after_rl": summary["after"][metric],
        "rl_steps": run["rl_steps"],
        "curve": curve,
        "command": cmd,
        "code_commit": commit,
        "wall_seconds": run["wall_seconds"],
        "peak_rss_mib": run["peak_rss_mib"],
        "mechanism": run["mechanism"],
        # every step metric's first- and last-quarter mean (training success, non-zero
        # advantages, entropy, clipping, grad norm): what to read when a curve stays flat
        "step_metrics": run["step_metrics"],
    }


def stopped_row(
    seed: int, rl_dir: Path, metric: str, limit_s: float, cmd: str, commit: str
) -> dict[str, Any]:
    """A seed's run killed at `--run-limit-s`: its held-out curve and the RL steps it logged
    (from its RL stage's metrics.jsonl, `rl_dir`), kept under "stopped" in KEY.json and never
    counted in the RL gain; a later run of the seed replaces it."""
    return {
        "seed": seed,
        "stopped_after_s": limit_s,
        "rl_steps_done": len(step_records(rl_dir)),  # a line cut by the kill is skipped
        "curve": eval_curve(rl_dir, metric),
        "command": cmd,
        "code_commit": commit,
    }


def rl_gain(seeds: list[dict[str, Any]]) -> dict[str, float] | None:
    """after_rl - warm_start per seed (after_rl - before without a warm start): mean, min, max."""
    gains = [
        s["after_rl"] - (s["warm_start"] if s["warm_start"] is not None else s["before"])
        for s in seeds
    ]
    if not gains:
        return None
    return {"mean": statistics.mean(gains), "min": min(gains), "max": max(gains), "n": len(gains)}


MERGE_KEYS = ("key", "recipe", "metric", "held_out_tasks", "rl_steps", "set")
"""What the seeds of one results file share: files that differ in any of these do not merge."""


def merge_results(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One family's results files, each holding some seeds (e.g. written side by side by
    processes on one machine, each with its own --results), as one: the seeds of all, in seed
    order, and the RL gain over them. Refused (ValueError) where the files differ in a
    `MERGE_KEYS` setting or two hold the same seed."""
    if not parts:
        raise ValueError("nothing to merge")
    first = parts[0]
    for part in parts[1:]:
        differ = [  # a file of stopped runs only may not know its held-out count
            k
            for k in MERGE_KEYS
            if part.get(k) != first.get(k)
            and not (k == "held_out_tasks" and None in (part.get(k), first.get(k)))
        ]
        if differ:
            raise ValueError(
                "these results differ in "
                + ", ".join(f"{k} ({first.get(k)!r} vs {part.get(k)!r})" for k in differ)
            )
    seeds: dict[int, dict[str, Any]] = {}
    for part in parts:
        for row in part["seeds"]:
            if row["seed"] in seeds:
                raise ValueError(f"seed {row['seed']} is in two of the files")
            seeds[row["seed"]] = row
    merged = [seeds[s] for s in sorted(seeds)]
    stopped = {row["seed"]: row for part in parts for row in part.get("stopped", [])}
    machines = [part["machine"] for part in parts if part.get("machine")]
    return {
        **{k: first[k] for k in MERGE_KEYS if k in first},
        "held_out_tasks": next(
            (p["held_out_tasks"] for p in parts if p.get("held_out_tasks") is not None), None
        ),
        "seeds": merged,
        **(
            {"stopped": [stopped[s] for s in sorted(stopped) if s not in seeds]}
            if set(stopped) - set(seeds)
            else {}
        ),
        "rl_gain": rl_gain(merged),
        "machine": machines[0]
        if len({json.dumps(m, sort_keys=True) for m in machines}) == 1
        else machines,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Held-out metric against RL steps: each seed thin, the mean thick, the min-max band."""
    curves = [dict((int(s), v) for s, v in seed["curve"]) for seed in result["seeds"]]
    plot_curves(
        {"mean": curves},
        path,
        f"{result['key']}: {result['recipe']}",
        f"held-out {result['metric']} ({result['held_out_tasks']} tasks)",
        seed_names=[f"seed {seed['seed']}" for seed in result["seeds"]],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("key", help=f"the family's file key ({', '.join(FAMILIES)})")
    parser.add_argument("--recipe", help="the recipe that shows the family (default: FAMILIES)")
    parser.add_argument("--steps", type=int, help="RL optimizer steps per seed (FAMILIES)")
    parser.add_argument("--eval-every", type=int, help="held-out curve spacing (FAMILIES)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    parser.add_argument("--eval-tasks", type=int, default=0, help="0: the recipe's own")
    parser.add_argument("--metric", default="success")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the run")
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--force", action="store_true", help="rerun seeds already in the file")
    parser.add_argument("--results", default=str(RESULTS), help="where KEY.json is written")
    parser.add_argument(
        "--keep-runs",
        metavar="DIR",
        help="keep each seed's run (checkpoints, metrics) in DIR/seed-S, e.g. to evaluate the"
        " trained policy elsewhere (bench/miniwob_suite.py --checkpoint); default: a temporary"
        " directory, removed",
    )
    parser.add_argument(
        "--run-limit-s",
        type=float,
        default=0.0,
        help="stop a seed's run after this many seconds (a lent machine's limit), keeping its"
        " curve so far under 'stopped' in KEY.json, never in the RL gain; a later run of the"
        " seed replaces it (0: no limit)",
    )
    parser.add_argument("--plot", action="store_true", help="only redraw KEY.png")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="DIR",
        help="write KEY.json from the KEY.json of each DIR (seeds run side by side, each with"
        " its own --results), with the seeds of all; nothing is run",
    )
    args = parser.parse_args()
    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{args.key}.json"
    if args.merge:
        try:
            merged = merge_results(
                [json.loads((Path(d) / f"{args.key}.json").read_text()) for d in args.merge]
            )
        except (OSError, ValueError) as err:
            parser.error(f"--merge: {err}")
        path.write_text(json.dumps(merged, indent=2) + "\n")
        plot(merged, path.with_suffix(".png"))
        print(f"[{args.key}] seeds {[s['seed'] for s in merged['seeds']]}: wrote {path}")
        return
    previous = json.loads(path.read_text()) if path.exists() else None
    if args.plot:
        if previous is None:
            parser.error(f"no {path} to plot")
        plot(previous, path.with_suffix(".png"))
        return
    family = FAMILIES.get(args.key)
    if family is None and not (args.recipe and args.steps and args.eval_every):
        parser.error(
            f"{args.key!r} is not a family ({', '.join(FAMILIES)}): give --recipe, "
            "--steps and --eval-every"
        )
    args.recipe = args.recipe or family.recipe
    # the family's calibration belongs to its recipe; another --recipe starts from its own YAML
    calibration = family.overrides if family is not None and args.recipe == family.recipe else ()
    args.steps = args.steps or family.steps
    args.eval_every = args.eval_every or family.eval_every
    if previous is not None and previous["recipe"] != args.recipe and not args.force:
        parser.error(f"{path.name} holds recipe {previous['recipe']!r}; --force replaces it")
    kept = [] if args.force or previous is None else previous["seeds"]
    stages = recipe_stages(args.recipe)
    # the RL budget is the last stage's: an unscoped trainer.steps would clash with an SFT
    # stage's own `steps: 0` (config/load.py refuses it)
    scope = f"{stages[-1]}:" if stages else ""
    run_args = argparse.Namespace(
        model=args.model,
        minutes=0,  # no time budget: the run is budgeted in optimizer steps
        eval_tasks=args.eval_tasks,
        threads=args.threads,
        set=[
            f"{scope}trainer.steps={args.steps}",
            f"{scope}trainer.eval_every={args.eval_every}",
            "trainer.log_trajectories=0",
            *calibration,
            *args.set,
        ],
    )
    command = shlex.join([".venv/bin/python", "bench/learning.py", *sys.argv[1:]])
    stopped = {} if args.force or previous is None else previous_stopped(previous)
    held_out = previous.get("held_out_tasks") if previous and kept else args.eval_tasks or None
    for seed in args.seeds:
        if any(s["seed"] == seed for s in kept):
            print(f"[{args.key}] seed {seed} is in {path.name}: kept (--force reruns)")
            continue
        commit = code_commit()  # before the run: the code it starts with
        row = None
        with contextlib.ExitStack() as stack:
            if args.keep_runs:  # the run's checkpoints, metrics and summary stay for later use
                out = Path(args.keep_runs) / f"seed-{seed}"
                if out.exists() and any(out.iterdir()):  # a run there would resume, not start
                    raise SystemExit(f"{out} is not empty: remove it or keep runs elsewhere")
                out.mkdir(parents=True, exist_ok=True)
            else:
                out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="learning-")))
            run_dir = out / args.recipe
            rl_dir = run_dir / stages[-1] if stages else run_dir
            try:
                run = run_one(run_args, args.recipe, seed, out, args.run_limit_s or None)
            except RunStopped as stop:
                print(stop, flush=True)
                stopped[seed] = stopped_row(
                    seed, rl_dir, args.metric, args.run_limit_s, command, commit
                )
            else:
                summary = flat_summary(run["summary"])
                row = seed_row(
                    run, summary, eval_curve(rl_dir, args.metric), args.metric, command, commit
                )
                held_out = summary["eval_tasks"]
        if row is not None:
            if stages and (not row["curve"] or row["curve"][0][0] != 0):  # from the last stage
                row["curve"].insert(0, [0, row["warm_start"]])
            kept.append(row)
            kept.sort(key=lambda s: s["seed"])
            stopped.pop(seed, None)
        result = {
            "key": args.key,
            "recipe": args.recipe,
            "metric": args.metric,
            "held_out_tasks": held_out,
            "rl_steps": args.steps,
            "set": [*calibration, *args.set],
            "seeds": kept,
            **({"stopped": [stopped[s] for s in sorted(stopped)]} if stopped else {}),
            "rl_gain": rl_gain(kept),
            "machine": machine(),
        }
        path.write_text(json.dumps(result, indent=2) + "\n")
        if row is None:
            print(f"[{args.key} seed {seed}] stopped: kept under 'stopped' in {path}", flush=True)
            continue
        print(
            f"[{args.key} seed {seed}] {row['before']} -> {row['warm_start']} -> "
            f"{row['after_rl']} in {row['rl_steps']} RL steps; wrote {path}",
            flush=True,
        )
        plot(result, path.with_suffix(".png"))


def previous_stopped(previous: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The stopped runs of a results file by seed (a seed finished since is not stopped)."""
    done = {row["seed"] for row in previous["seeds"]}
    return {row["seed"]: row for row in previous.get("stopped", []) if row["seed"] not in done}


if __name__ == "__main__":
    main()

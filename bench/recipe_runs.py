"""Run any recipe on the bundled model within a CPU budget and record what it learned.

For each recipe (and seed) this trains the recipe as `agentic-rl train` does (its warm start,
its stages, its evaluations), with the RL steps capped by `trainer.max_minutes`, in a child
process so that wall time and peak memory are the run's own. It writes
`bench/results/recipes/RECIPE.json`:

- `summary`: the run's summary.json (held-out evaluation before RL, after the warm start and
  after RL; per stage for multi-stage recipes);
- `mechanism`: the recipe's own mechanism metrics (searches per episode, TTRL's label accuracy,
  Absolute Zero's proposer learnability, ...; `MECHANISM` below), mean of the first and the
  last quarter of the RL steps, and every other numeric step metric the same way in
  `step_metrics`;
- `wall_seconds`, `peak_rss_mib` (the child's maximum resident set), the command and the
  machine (CPU model, cores, torch threads).

While a child runs, each held-out evaluation it logs is printed as it lands (the progress of a
long run); its output goes to `RECIPE-seedS.log` in the run's folder as it is written.

`--all` runs every recipe in `recipes/` in turn and skips those whose result file exists, so a
killed sweep resumes where it stopped (`--force` reruns).

    .venv/bin/python bench/recipe_runs.py calculator_grpo --minutes 10
    .venv/bin/python bench/recipe_runs.py ttrl --minutes 10 --seeds 3 --eval-tasks 50
    .venv/bin/python bench/recipe_runs.py --all --minutes 8          # resumable sweep
    .venv/bin/python bench/recipe_runs.py countdown --model tiny --minutes 0.2 --eval-tasks 2 \\
        --set trainer.steps=1 warm_start.num_tasks=2                   # does it run
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "recipes"

# The metric(s) that show each recipe's defining mechanism acting, as logged in metrics.jsonl.
# Recipes not listed report reward, success and tool calls (always recorded).
MECHANISM: dict[str, list[str]] = {
    "ttrl": ["ttrl_label_accuracy"],
    "absolute_zero": ["az_learnability"],
    "qwen3_thinking": ["response_tokens"],
    "dapo_math": [
        "clip_frac",
        "gen_batches",
        "nonzero_adv_fraction",
        "overlong_penalty",
        "overlong_penalized",
    ],
    "gigpo_gridworld": ["step_adv_nonzero", "shared_step_groups"],
    "search_r1": ["tool_calls_per_episode", "value_loss"],
    "stepsearch": ["tool_calls_per_episode"],
    "asearcher": ["tool_calls_per_episode", "turns"],
    "deepresearcher": ["tool_calls_per_episode"],
    "r1_searcher": ["tool_calls_per_episode"],
    "research": ["tool_calls_per_episode"],
    "zerosearch": ["tool_calls_per_episode"],
    "retool": ["tool_calls_per_episode"],
    "rstar2_agent": ["tool_calls_per_episode", "tool_errors_per_episode", "roc_positive_penalty"],
    "artist": ["tool_calls_per_episode"],
    "code_tests": ["success"],
    "swe_rl": ["reward"],
    "one_shot_rlvr": ["success"],
}
ALWAYS = ["reward", "success", "tool_calls_per_episode", "response_tokens", "step_seconds"]


def recipes() -> list[str]:
    return sorted(p.stem for p in (ROOT / "recipes").glob("*.yaml"))


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def quarter_means(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """first / last quarter means (and the number of steps) of every numeric step metric."""
    keys = sorted({k for r in records for k, v in r.items() if isinstance(v, int | float)})
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        if key in ("step", "time"):
            continue
        values = [float(r[key]) for r in records if isinstance(r.get(key), int | float)]
        if not values:
            continue
        q = max(1, len(values) // 4)
        out[key] = {
            "first": statistics.mean(values[:q]),
            "last": statistics.mean(values[-q:]),
            "steps": len(values),
        }
    return out


def metric_records(path: Path) -> list[dict[str, Any]]:
    """The records of one metrics.jsonl; a line being written, or cut by a kill, is skipped."""
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def step_records(run_dir: Path) -> list[dict[str, Any]]:
    """The RL step records of a run (or of every stage of a multi-stage run, in order)."""
    files = sorted(run_dir.rglob("metrics.jsonl"), key=lambda p: p.stat().st_mtime)
    return [
        {k.removeprefix("train/"): v for k, v in r.items()}
        for path in files
        for r in metric_records(path)
        if r.get("step", 0) > 0 and "train/reward" in r  # an RL step, not an eval
    ]


def child(args: argparse.Namespace) -> None:
    """Train one recipe in this process and print its peak RSS (the parent measures time)."""
    import torch

    from agentic_rl.config.load import load_config
    from agentic_rl.train.stages import train_recipe

    torch.set_num_threads(args.threads)
    cfg = load_config(args.recipe, args.overrides)
    train_recipe(cfg)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_rss_mib": peak_kib / 1024}), flush=True)


PROGRESS_EVERY_S = 30.0
"""How often a running child's new held-out evaluations are printed."""


def _left(limit_s: float | None, waited: float) -> float:
    """Seconds until the next progress look: the poll interval, cut at the run's limit."""
    return (
        PROGRESS_EVERY_S if limit_s is None else max(0.01, min(PROGRESS_EVERY_S, limit_s - waited))
    )


def eval_lines(run_dir: Path) -> list[tuple[str, int, str]]:
    """The held-out evaluations a run has logged so far, as (stage, step, line): each eval
    record's success (and the RL steps done), in every stage's metrics.jsonl."""
    out = []
    for path in sorted(run_dir.rglob("metrics.jsonl"), key=lambda p: p.stat().st_mtime):
        stage = "" if path.parent == run_dir else f"{path.parent.name}: "
        for record in metric_records(path):
            for key, value in record.items():
                split, _, metric = key.partition("/")
                if split.startswith("eval") and metric == "success":
                    step = int(record.get("step", 0))
                    text = f"{stage}step {step} {split} success {float(value):.3f}"
                    out.append((stage, step, text))
    return out


def print_progress(run_dir: Path, label: str, printed: set[tuple[str, int, str]]) -> None:
    """Print the run's held-out evaluations not printed yet (a long run's progress)."""
    for item in eval_lines(run_dir):
        if item not in printed:
            printed.add(item)
            print(f"{label} {item[2]}", flush=True)


class RunStopped(Exception):
    """A child run killed at its time limit (`run_one(..., limit_s=...)`); what it logged stays
    in its out_dir."""


def run_one(
    args: argparse.Namespace, recipe: str, seed: int, out_dir: Path, limit_s: float | None = None
) -> dict[str, Any]:
    overrides = [  # the budget acts in every stage ('*:'), whatever a stage sets itself
        f"model.name={args.model}",
        f"trainer.seed={seed}",
        f"*:trainer.max_minutes={args.minutes}",
        f"trainer.out_dir={out_dir}",
        "trainer.progress=false",
        "trainer.tensorboard=false",
        *([f"env.num_eval_tasks={args.eval_tasks}"] if args.eval_tasks else []),
        *args.set,
    ]
    cmd = [sys.executable, __file__, "--child", recipe, "--threads", str(args.threads)]
    cmd += ["--overrides", *overrides]
    label = f"[{recipe} seed {seed}]"
    print(f"{label} {shlex.join(cmd[2:])}", flush=True)
    start = time.perf_counter()
    log = out_dir / f"{recipe}-seed{seed}.log"
    run_dir = out_dir / recipe
    with log.open("w") as sink:  # written as the child goes: `tail -f` it
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=sink, text=True)
        printed: set[tuple[str, int, str]] = set()
        while True:
            waited = time.perf_counter() - start
            try:  # communicate keeps reading stdout while it waits: the pipe never fills
                stdout, _ = proc.communicate(timeout=_left(limit_s, waited))
                break
            except subprocess.TimeoutExpired:
                print_progress(run_dir, label, printed)
                if limit_s is not None and time.perf_counter() - start >= limit_s:
                    proc.kill()
                    sink.write(proc.communicate()[0] or "")
                    raise RunStopped(f"{recipe} seed {seed} stopped after {limit_s} s") from None
        sink.write(stdout)
    print_progress(run_dir, label, printed)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{recipe} seed {seed} failed (exit {proc.returncode}):\n{tail}")
    peak = json.loads(stdout.strip().splitlines()[-1])["peak_rss_mib"]
    summary = json.loads((run_dir / "summary.json").read_text())
    records = step_records(run_dir)
    steps = quarter_means(records)
    wanted = ALWAYS + MECHANISM.get(recipe, [])
    return {
        "seed": seed,
        "summary": summary,
        "mechanism": {k: steps[k] for k in wanted if k in steps},
        # a mechanism metric the run never logged (misnamed here, or the mechanism never acted)
        "mechanism_missing": [k for k in MECHANISM.get(recipe, []) if k not in steps],
        "step_metrics": steps,
        "rl_steps": len(records),
        "wall_seconds": round(wall, 1),
        "peak_rss_mib": round(peak, 1),
    }


def held_out_line(summary: dict[str, Any]) -> str:
    """`before -> warm start -> after` held-out success (per stage when staged; a KnownSelf
    stage names its own evaluations: `{"evals": {"sft_only": {...}, ...}}`)."""
    if "stages" in summary:
        return "; ".join(f"{k}: {held_out_line(v)}" for k, v in summary["stages"].items())
    if "evals" in summary:
        return ", ".join(f"{k} {e['success']:.2f}" for k, e in summary["evals"].items()) or "-"
    parts = [
        f"{summary[k]['success']:.2f}" for k in ("before", "warm_start", "after") if k in summary
    ]
    return " -> ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recipe", nargs="?", help="a recipe name (see recipes/)")
    parser.add_argument("--all", action="store_true", help="every recipe in turn (resumable)")
    parser.add_argument("--force", action="store_true", help="rerun recipes that have results")
    parser.add_argument("--minutes", type=float, default=10.0, help="RL budget per run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1")
    parser.add_argument("--eval-tasks", type=int, default=0, help="0: the recipe's own")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the run")
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--overrides", nargs="*", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if bool(args.recipe) == args.all:
        parser.error("give one RECIPE or --all")
    names = recipes() if args.all else [args.recipe]
    unknown = sorted(set(names) - set(recipes()))
    if unknown:
        parser.error(f"unknown recipe {unknown[0]!r}; known: {', '.join(recipes())}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for recipe in names:
        result_path = args.out_dir / f"{recipe}.json"
        if result_path.exists() and not args.force:
            print(f"[{recipe}] has {result_path.name}: skipped (--force reruns)", flush=True)
            continue
        runs, errors, load = [], [], os.getloadavg()[0]
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory(prefix=f"recipe-{recipe}-") as tmp:
                try:
                    runs.append(run_one(args, recipe, seed, Path(tmp)))
                except RuntimeError as err:  # one failed recipe must not end a sweep
                    print(err, flush=True)
                    errors.append(str(err)[-1500:])
            if runs:
                print(
                    f"[{recipe} seed {seed}] held-out success {held_out_line(runs[-1]['summary'])}"
                )
        result = {
            "recipe": recipe,
            "command": shlex.join([sys.executable, *sys.argv]),
            "minutes": args.minutes,
            "model": args.model,
            "threads": args.threads,
            "set": args.set,
            "machine": machine(),
            "load_before": load,
            "runs": runs,
            "errors": errors,
        }
        if runs:  # failures are reported, not written as results (a rerun retries them)
            result_path.write_text(json.dumps(result, indent=2))
            print(f"[{recipe}] wrote {result_path}", flush=True)


if __name__ == "__main__":
    main()

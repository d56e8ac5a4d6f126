"""Arms x seeds comparisons on one recipe: each run a separate `agentic-rl train` process.

The shared half of the benches that compare settings of one recipe (bench/newer_losses.py,
bench/tree_rollouts.py): one run per (arm, seed) with the arm's overrides, budgeted in RL steps
(time limits off, so a loaded machine changes the time, not the result), its train metrics and
held-out evaluations read back from metrics.jsonl, and a results file rewritten after every
run so that a killed comparison resumes where it stopped.

On a machine lent for a limited time, `--run-limit-s` stops a run that is still going after
that many seconds: what it logged so far is kept under "stopped" in the results file (with the
limit), never under "results", whose means compare finished runs only; a rerun plays it again.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EVAL_PREFIXES = ("eval_before", "eval_warm_start", "eval")


def arm_parser(description: str, arms: Sequence[str], results: Path) -> argparse.ArgumentParser:
    """The options every comparison takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--recipe", default="search_qa_grpo")
    parser.add_argument("--arms", nargs="+", default=list(arms), choices=list(arms))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--overrides", nargs="*", default=[], help="added to every run")
    parser.add_argument("--out", type=Path, default=results)
    parser.add_argument(
        "--run-limit-s",
        type=float,
        default=0.0,
        help="stop a run after this many seconds, keeping what it logged under 'stopped' (0: none)",
    )
    return parser


def run_arm(
    args: argparse.Namespace,
    arm: str,
    overrides: Sequence[str],
    seed: int,
    out: Path,
    train_keys: Sequence[str],
) -> dict[str, Any]:
    """One `agentic-rl train` run of `args.recipe` with the arm's overrides: the train metrics
    named in `train_keys` per step and every held-out evaluation (with its prefix)."""
    run_name = f"{arm}-{seed}"
    cmd = [sys.executable, "-m", "agentic_rl.cli", "train", args.recipe]
    cmd += [
        f"trainer.seed={seed}",
        f"trainer.steps={args.steps}",
        f"trainer.eval_every={args.eval_every}",
        "trainer.max_minutes=0",
        "trainer.progress=false",
        "trainer.log_trajectories=0",
        f"trainer.out_dir={out}",
        f"trainer.run_name={run_name}",
        *overrides,
        *args.overrides,
    ]
    t0 = time.time()
    limit = getattr(args, "run_limit_s", 0.0) or None
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:  # the child is killed; what it logged is kept
        done = None
    if done is not None and done.returncode != 0:
        raise RuntimeError(f"{arm} seed {seed} failed:\n{done.stderr[-3000:]}")
    run = read_metrics(out / run_name / "metrics.jsonl", train_keys)
    run = {**run, "wall_seconds": time.time() - t0, "command": cmd}
    return run if done is not None else {**run, "stopped_after_s": limit}


def read_metrics(path: Path, train_keys: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """A run's train metrics named in `train_keys` per step and its held-out evaluations (with
    their prefixes and the env's own metrics), from its metrics.jsonl; empty lists for a run
    stopped before writing any, and a last line cut by a kill is skipped."""
    rows = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    train = [
        {"step": r["step"], **{k: r[f"train/{k}"] for k in train_keys if f"train/{k}" in r}}
        for r in rows
        if "train/reward" in r
    ]
    evals = [
        {"step": r["step"], "success": r[f"{p}/success"], "split": p, "env": env_metrics(r, p)}
        for r in rows
        for p in EVAL_PREFIXES
        if f"{p}/success" in r
    ]
    return {"train": train, "eval": evals}


def env_metrics(row: dict[str, Any], prefix: str) -> dict[str, float]:
    """The env's own metrics of one evaluation (`PREFIX/env/NAME`, e.g. a role's reward term),
    by NAME: what a reading of the held-out success needs besides it."""
    head = f"{prefix}/env/"
    return {k[len(head) :]: v for k, v in row.items() if k.startswith(head)}


def run_arms(
    args: argparse.Namespace,
    arms: dict[str, list[str]],
    train_keys: Sequence[str],
    header: dict[str, Any],
    summarise: Callable[[dict[str, Any]], dict[str, float | None]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every (seed, arm) of `args` not yet in `args.out`, the file rewritten after each run;
    returns results[arm][str(seed)]. With `summarise` (one run -> its numbers) the file also
    holds "summary": {arm: {key: the mean over the arm's seeds, "seeds": n}}, the numbers a
    docs page shows; a rerun with every run already in the file only rewrites it."""
    results: dict[str, dict[str, Any]] = {}
    stopped: dict[str, dict[str, Any]] = {}  # runs cut by --run-limit-s: rerun on resume
    if args.out.is_file():  # resume: keep the arms and seeds already measured
        previous = json.loads(args.out.read_text())
        results, stopped = previous.get("results", {}), previous.get("stopped", {})

    def write() -> None:
        record = {
            "command": " ".join(sys.argv),
            "recipe": args.recipe,
            "steps": args.steps,
            "eval_every": args.eval_every,
            **header,
            "arms": {a: arms[a] for a in results},
            "machine": platform.platform(),
            "results": results,
        }
        if stopped:
            record["stopped"] = stopped
        if summarise is not None:
            record["summary"] = {
                arm: arm_summary([summarise(run) for run in seeds.values()])
                for arm, seeds in results.items()
            }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1))

    with tempfile.TemporaryDirectory(prefix="arms-") as tmp:
        for seed in args.seeds:
            for arm in args.arms:
                if str(seed) in results.get(arm, {}):
                    continue
                print(f"[{arm} seed {seed}]", flush=True)
                run = run_arm(args, arm, arms[arm], seed, Path(tmp), train_keys)
                if "stopped_after_s" in run:
                    stopped.setdefault(arm, {})[str(seed)] = run
                    print(f"[{arm} seed {seed}] stopped after {run['stopped_after_s']} s")
                else:
                    results.setdefault(arm, {})[str(seed)] = run
                    stopped.get(arm, {}).pop(str(seed), None)
                    stopped = {a: runs for a, runs in stopped.items() if runs}
                write()
    if results:
        write()
    return results


def mean_of(values: Sequence[float]) -> float | None:
    """The mean, None for no values (a metric no step logged)."""
    return statistics.fmean(values) if values else None


def held_out(run: dict[str, Any]) -> tuple[float | None, float | None]:
    """A run's held-out success where RL starts (the last evaluation before RL: after the warm
    start, or the untrained one without a warm start) and at its last RL evaluation; None where
    the run logged none."""
    before = [e["success"] for e in run["eval"] if e["split"] != "eval"]
    after = [e["success"] for e in run["eval"] if e["split"] == "eval"]
    return (before[-1] if before else None), (after[-1] if after else None)


def held_out_curve(run: dict[str, Any]) -> dict[int, float]:
    """A run's held-out success by RL step: step 0 where RL starts (`held_out`'s before), then
    every RL evaluation."""
    before, _ = held_out(run)
    curve = {0: before} if before is not None else {}
    curve.update({int(e["step"]): e["success"] for e in run["eval"] if e["split"] == "eval"})
    return curve


def plot_arms(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """Held-out success against RL steps, one colour per arm (`plot_curves`)."""
    groups = {}
    for arm, seeds in results.items():
        groups[f"{arm} ({len(seeds)} seeds)"] = [held_out_curve(run) for run in seeds.values()]
    plot_curves(groups, path, title, "held-out success")


def plot_curves(
    groups: dict[str, list[dict[int, float]]],
    path: Path,
    title: str,
    ylabel: str,
    seed_names: list[str] | None = None,
) -> None:
    """A metric in [0, 1] against RL steps, one colour per group (the mean's label -> each seed's
    curve, step -> value): each seed thin (in the legend when `seed_names` names them), the mean
    over seeds thick, with the min-max band, on the steps every seed has."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=120)
    for k, (label, curves) in enumerate(groups.items()):
        color = f"C{k}"
        names = seed_names or [None] * len(curves)
        for curve, name in zip(curves, names, strict=True):
            steps = sorted(curve)
            style = {"alpha": 0.5, "label": name} if name else {"alpha": 0.35, "color": color}
            ax.plot(steps, [curve[s] for s in steps], lw=0.8, **style)
        common = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
        if common:
            values = [[c[s] for c in curves] for s in common]
            low, high = [min(v) for v in values], [max(v) for v in values]
            ax.fill_between(common, low, high, alpha=0.15, color=color)
            mean = [statistics.fmean(v) for v in values]
            ax.plot(common, mean, lw=2.2, color=color, label=label)
    ax.set_xlabel("RL steps (0 = after the warm start)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def gain_summary(run: dict[str, Any]) -> dict[str, float | None]:
    """What RL added in one run: held-out success before RL and after it (`held_out`), the
    gain, that gain per million decoded tokens (what the arm spent to get it) and the mean
    decoded tokens a step."""
    before, after = held_out(run)
    gain = after - before if before is not None and after is not None else None
    decoded = [row["decoded_tokens"] for row in run["train"] if "decoded_tokens" in row]
    millions = sum(decoded) / 1e6
    return {
        "before": before,
        "success": after,
        "gain": gain,
        "gain_per_m_tokens": gain / millions if gain is not None and millions else None,
        "decoded_per_step": mean_of(decoded),
    }


def arm_summary(rows: list[dict[str, float | None]]) -> dict[str, float | int | None]:
    """The mean of each key over an arm's per-seed summaries (seeds without it left out; None
    where no seed has it), "seeds": how many runs, and for "gain" also "gain_min", "gain_max"
    and "gain_seeds" (how many runs have a gain: a run without a point before RL has none, so
    the gain may be over fewer seeds than the success after RL): a claim over seeds is the mean
    and the spread."""
    keys = list(dict.fromkeys(key for row in rows for key in row))
    out: dict[str, float | int | None] = {"seeds": len(rows)}
    for key in keys:
        values = [row[key] for row in rows if row.get(key) is not None]
        out[key] = mean_of(values)
        if key == "gain":
            out["gain_min"] = min(values) if values else None
            out["gain_max"] = max(values) if values else None
            out["gain_seeds"] = len(values)
    return out


def seed_mean(rows: list[dict[str, float | None]], key: str) -> str:
    """The mean of `key` over an arm's per-seed summaries (seeds without it left out), written
    to three decimals for a results table; "-" where no seed has it."""
    values = [row[key] for row in rows if row[key] is not None]
    return f"{statistics.fmean(values):.3f}" if values else "-"

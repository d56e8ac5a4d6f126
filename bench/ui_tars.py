"""The `ui_tars` recipe on the bundled model: held-out success after each stage.

Runs the three-stage pipeline (warm start, learning from failures with DPO, GRPO) on MiniWoB++
pages in headless Chromium and writes bench/results/ui_tars.json: the held-out success rate
after each stage (per task too), the failure-pair counts and the DPO result, and wall times.

    OMP_NUM_THREADS=1 .venv/bin/python bench/ui_tars.py [dotted overrides...]
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.train.stages import stage_configs, train_recipe

OUT = Path(__file__).parent / "results" / "ui_tars.json"


def per_task_success(run: Path, split: str = "eval") -> dict[str, float]:
    """Success per MiniWoB++ task of the run's last greedy evaluation of `split` ("eval": the
    stage's final one; "eval_before": the untrained model's) from its trajectories file."""
    import gzip

    rows = []
    with gzip.open(run / "trajectories.jsonl.gz", "rt") as f:
        for line in f:
            record = json.loads(line)
            if record.get("split") == split:
                rows.append(record)
    if not rows:
        return {}
    last = max(r.get("step", 0) for r in rows)
    by_task: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("step", 0) == last and "task_id" in r:
            name = r["task_id"].removeprefix("miniwob-").rsplit("-", 1)[0]
            by_task[name].append(float(r.get("success", 0.0)))
    return {k: sum(v) / len(v) for k, v in sorted(by_task.items())}


def main(overrides: list[str]) -> None:
    out_dir = Path("runs/bench_ui_tars")
    reuse = "--reuse-stages" in overrides  # rerun only the stages whose directory was removed
    overrides = [o for o in overrides if o != "--reuse-stages"]
    if (out_dir / "ui_tars").exists() and not reuse:  # finished stages would be skipped
        raise SystemExit(
            f"{out_dir / 'ui_tars'} exists: remove it for a fresh measurement, or pass "
            "--reuse-stages to keep its finished stages (their summaries are read back)"
        )
    if reuse:  # the pipeline summary would say every stage is done
        (out_dir / "ui_tars" / "summary.json").unlink(missing_ok=True)
    cfg = load_config("ui_tars", [f"trainer.out_dir={out_dir}", *overrides])
    t0 = time.time()
    summary = train_recipe(cfg)
    stages = stage_configs(cfg)
    result: dict = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python bench/ui_tars.py " + " ".join(overrides),
        "model": cfg.model.name,
        "eval_tasks": cfg.env.num_eval_tasks,
        "wall_seconds": round(time.time() - t0, 1),
        "success": {},
        "reward": {},
        "stages": {},
    }
    first = summary["stages"][Path(stages[0].trainer.run_name).name]
    if "before" in first:  # the untrained model (the first stage's trainer.eval_before)
        result["success"]["before"] = first["before"]["success"]
        result["reward"]["before"] = first["before"]["reward"]
        result["stages"]["before"] = {"eval": first["before"]}
        with contextlib.suppress(OSError, ValueError, KeyError):
            first_run = Path(stages[0].trainer.out_dir) / stages[0].trainer.run_name
            result["stages"]["before"]["success_per_task"] = per_task_success(
                first_run, "eval_before"
            )
    for stage in stages:
        name = Path(stage.trainer.run_name).name
        run = Path(stage.trainer.out_dir) / stage.trainer.run_name
        s = summary["stages"][name]
        result["success"][name] = s["after"]["success"]
        result["reward"][name] = s["after"]["reward"]
        info = {"eval": s["after"], "wall_seconds": s["wall_seconds"], "steps": s["steps"]}
        with contextlib.suppress(OSError, ValueError, KeyError):
            info["success_per_task"] = per_task_success(run)
        rows = [r for r in read_metrics(run / "metrics.jsonl") if "failure_dpo/pairs" in r]
        if rows:
            info["failure_dpo"] = {k.split("/", 1)[1]: v for k, v in rows[0].items() if "/" in k}
        result["stages"][name] = info
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["success"], indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])

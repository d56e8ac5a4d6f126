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


def per_task_success(run: Path) -> dict[str, float]:
    """Success per MiniWoB++ task of the run's last greedy evaluation (trajectories file)."""
    import gzip

    rows = []
    with gzip.open(run / "trajectories.jsonl.gz", "rt") as f:
        for line in f:
            record = json.loads(line)
            if str(record.get("split", "")).startswith("eval"):
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
    cfg = load_config("ui_tars", ["trainer.out_dir=runs/bench_ui_tars", *overrides])
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

"""The MiniWoB++ suite as an evaluation: a policy's success rate over the benchmark's task set.

Runs `agentic-rl eval ui_tars env.options.tasks=all env.num_eval_tasks=N` (every task page the
installed `miniwob` package registers, the same number of pages per task, greedy, in headless
Chromium) in a child process, on the recipe's starting model or on `--checkpoint`, and writes
`bench/results/miniwob_suite.json`:

    {"command": "...", "checkpoint": null | "...", "model": "...", "eval_tasks": N,
     "tasks": T, "success": x, "per_task": {"click-button": x, ...},
     "tasks_solved": k, "wall_seconds": s, "machine": {...}}

`success` is the success rate over all pages (with the same number of pages per task, the
benchmark's success rate over its task set) and `tasks_solved` the number of tasks with at least
one page solved.

    .venv/bin/python bench/miniwob_suite.py                       # the bundled model, 125 pages
    .venv/bin/python bench/miniwob_suite.py --checkpoint runs/ui_tars --out /tmp/suite.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipe_runs import machine  # noqa: E402  (bench/ is scripts, not a package)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "miniwob_suite.json"
PER_TASK = "env/success@"


def suite_result(
    printed: dict[str, Any], command: list[str], eval_tasks: int, seconds: float
) -> dict[str, Any]:
    """The results file's content from the eval command's printed JSON."""
    per_task = {k[len(PER_TASK) :]: float(v) for k, v in printed.items() if k.startswith(PER_TASK)}
    if not per_task:
        raise SystemExit(f"the eval printed no {PER_TASK}TASK metric: {sorted(printed)}")
    return {
        "command": shlex.join(command),
        "checkpoint": printed.get("checkpoint"),
        "model": printed.get("model"),
        "eval_tasks": eval_tasks,
        "tasks": len(per_task),
        "success": float(printed["success"]),
        "per_task": dict(sorted(per_task.items())),
        "tasks_solved": sum(v > 0 for v in per_task.values()),
        "wall_seconds": round(seconds, 1),
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", default="", help="a run or checkpoint dir (default: none)")
    parser.add_argument("--eval-tasks", type=int, default=125, help="pages in all")
    parser.add_argument("--set", nargs="*", default=[], help="more overrides")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    command = [
        sys.executable,
        "-m",
        "agentic_rl.cli",
        "eval",
        "ui_tars",
        "env.options.tasks=all",
        f"env.num_eval_tasks={args.eval_tasks}",
        *args.set,
    ]
    if args.checkpoint:
        command += ["--checkpoint", args.checkpoint]
    start = time.time()
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the eval failed (exit {done.returncode}): {shlex.join(command)}")
    result = suite_result(json.loads(done.stdout), command, args.eval_tasks, time.time() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"success {result['success']:.1%} over {result['tasks']} tasks; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

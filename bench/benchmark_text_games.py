"""Step rates of the ScienceWorld and TextWorldExpress envs (envs/benchmarks/), no model.

For each game (TextWorldExpress) or task type (ScienceWorld) this plays the benchmark's gold
paths through the env (reset, expert turn, step: what a rollout does, without the model) and
reports commands per second, the time of a reset, and the gold paths' mean score and success;
for ScienceWorld also the cost of one valid-action list (what `valid_actions` adds a step). It
writes `bench/results/benchmark_text_games.json` with the command and the machine.

    .venv/bin/python bench/benchmark_text_games.py                 # ~2 minutes on 2 cores
    .venv/bin/python bench/benchmark_text_games.py --episodes 5    # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from agentic_rl.envs.benchmarks import jvm  # noqa: E402
from agentic_rl.envs.benchmarks.scienceworld import (  # noqa: E402
    ScienceWorldEnv,
    make_scienceworld_tasks,
)
from agentic_rl.envs.benchmarks.textworld_express import (  # noqa: E402
    TextWorldExpressEnv,
    make_textworld_express_tasks,
)
from agentic_rl.types import Action  # noqa: E402

OUT = ROOT / "bench" / "results" / "benchmark_text_games.json"
TWX_PARAMS = {  # the recipe's small games (recipes/textworld_express.yaml)
    "cookingworld": "numLocations=1,numIngredients=1,numDistractorItems=2,includeDoors=0,"
    "limitInventorySize=0",
    "twc": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
    "coin": "numLocations=3,numDistractorItems=0,includeDoors=0,limitInventorySize=0",
    "mapreader": "numLocations=3,maxDistanceApart=2,maxDistractorItemsPerLocation=0,"
    "includeDoors=0,limitInventorySize=0",
}
TWX_GAMES = ["cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting"]
SW_TYPES = ["find-non-living-thing", "lifespan-longest-lived", "boil", "use-thermometer"]


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


def play(env: Any, tasks: list[Any]) -> dict[str, float]:
    """Gold-path episodes: commands per second over the steps, mean reset time, score."""
    resets, steps, commands, score, success = 0.0, 0.0, 0, 0.0, 0.0
    for task in tasks:
        start = time.perf_counter()
        env.reset(task, 0)
        env.expert_turn()  # the gold path, generated outside the timed steps
        resets += time.perf_counter() - start
        total, done = 0.0, False
        while not done:
            text = env.expert_turn()[len("<action>") : -len("</action>")]
            start = time.perf_counter()
            result = env.step(Action(kind="tool", name="action", arguments={"actions": text}))
            steps += time.perf_counter() - start
            commands += result.info.get("actions", 0)
            total += result.info["env/score"]
            done = result.terminated or result.truncated
        score += total
        success += result.info.get("success", 0.0)
    n = len(tasks)
    return {
        "episodes": n,
        "commands": commands,
        "commands_per_second": commands / steps if steps else 0.0,
        "reset_plus_gold_path_seconds": resets / n,
        "mean_score": score / n,
        "success": success / n,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=10, help="gold-path episodes per game")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", "bench/benchmark_text_games.py", *sys.argv[1:]]),
        "machine": machine(),
        "textworld_express": {},
        "scienceworld": {},
    }
    twx = TextWorldExpressEnv(max_steps=100)
    for game in TWX_GAMES:
        tasks = make_textworld_express_tasks(
            "eval", args.episodes, games=game, game_params=TWX_PARAMS, eval_fold="dev"
        )
        play(twx, tasks[:1])  # warm the JVM's JIT for this game
        result["textworld_express"][game] = {"params": TWX_PARAMS.get(game, ""), **play(twx, tasks)}
        print(game, result["textworld_express"][game], flush=True)
    sw = ScienceWorldEnv(max_steps=200)
    for task_type in SW_TYPES:
        tasks = make_scienceworld_tasks("eval", args.episodes, task_types=task_type)
        play(sw, tasks[:1])
        result["scienceworld"][task_type] = play(sw, tasks)
        print(task_type, result["scienceworld"][task_type], flush=True)
    sw.reset(make_scienceworld_tasks("eval", 1, task_types="boil")[0], 0)
    start = time.perf_counter()
    sizes = [len(sw._valid()) for _ in range(10)]
    result["scienceworld"]["valid_action_list"] = {
        "task_type": "boil",
        "seconds": (time.perf_counter() - start) / 10,
        "entries": sizes[0],
    }
    jvm.close_jvms()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `code_tests` recipe: reward = fraction of unit tests passing in the sandbox.

The mechanism test rolls out hand-made edits of the shipped `clamp-swap` task through the
trainer (the recipe's env, format and sandbox pool): a half-correct fix scores 2/3 (hand
counted), the full fix 1, an edit that forks, attacks the sandbox worker and hangs scores 0
without harming the run or leaving processes, malformed output -1. The same half fix under the
SWE-RL reward (no execution) scores a text similarity instead.
"""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.code.repair import load_code_repair_tasks, oracle_completion
from agentic_rl.tools.sandbox import shared
from agentic_rl.train.collect import rollout
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# The smoke run skips the evaluations before RL (the generation they cost is most of a
# tiny-model run); the warm start, both RL steps and the final evaluation still run.
FAST = ["trainer.eval_before=false"]
TASK = next(t for t in load_code_repair_tasks() if t.task_id == "repair-clamp-swap")
# buggy: `if value < low: return high` / `if value > high: return low` / `return value`
# tests: clamp(15, 0, 10) == 10; clamp(-3, 0, 10) == 0; clamp(5, 0, 10) == 5


def edit(search: str, replace: str) -> str:
    return (
        "<think>\nThe branches are swapped.\n</think>\n<solution>\n```python\n"
        f"### numutil/clamp.py\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n"
        ">>>>>>> REPLACE\n```\n</solution>"
    )


# Fixes only the first branch: clamp(15, 0, 10) still returns 0 (fails), the other two pass.
HALF_FIX = edit(
    "    if value < low:\n        return high", "    if value < low:\n        return low"
)
# Module-level code every test imports: forks sleepers, tries to kill the sandbox worker, hangs.
HOSTILE = edit(
    "    return value",
    "    return value\n\n\nimport os, signal, time\nfor _ in range(3):\n    if os.fork() == 0:\n"
    "        time.sleep(60)\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\nexcept OSError:\n"
    "    pass\nwhile True:\n    pass",
)
PLANS = [HOSTILE, HALF_FIX, oracle_completion(TASK), "<solution>no thinking</solution>"]


def test_code_tests_smoke(tmp_path, warm_start_episodes, no_stray_processes):
    cfg = load_config("code_tests", [*SMOKE, *FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.env.options["reward"] == "tests"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    assert warm_start_episodes(tmp_path / "code_tests") == 8  # every expert episode succeeded


def rewards(scripted, overrides):
    cfg = load_config(
        "code_tests",
        [*SMOKE, "env.options.test_timeout_s=2.0", *overrides],
        smoke=True,
    )
    setup = build(cfg)
    scripted(lambda ep, index, turn: PLANS[index])
    episodes = rollout(setup, [TASK], group_size=len(PLANS), seed=0, step=1)
    return [s[0].reward for s in episodes.samples], [s[0].metrics for s in episodes.samples]


def test_reward_is_the_fraction_of_tests_passed(scripted, no_stray_processes):
    got, metrics = rewards(scripted, [])
    assert got == [0.0, pytest.approx(2 / 3), 1.0, -1.0]  # hostile, half, full, malformed
    assert [m["success"] for m in metrics] == [0.0, 0.0, 1.0, 0.0]
    # contained: the pool that ran the attack is up and serving (and no process survives it:
    # the no_stray_processes fixture checks after the pool is closed)
    (pool,) = shared._pools.values()
    assert pool.health()["status"] == "ok" and pool.run("print(6 * 7)").stdout == "42\n"


def test_without_execution_the_half_fix_scores_a_similarity(scripted, no_stray_processes):
    got, _ = rewards(scripted, ["env.options.reward=swe_rl"])
    assert got[2] == 1.0 and got[3] == -1.0
    assert 0.0 < got[1] < 1.0 and got[1] != pytest.approx(2 / 3)
    assert got[0] > 0.0  # never run: the hostile edit is only text, scored by similarity

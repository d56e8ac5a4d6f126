"""The shipped code-repair tasks and CodeRepairEnv with SWE-RL and unit-test rewards."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.code.repair import (
    CodeRepairEnv,
    load_code_repair_tasks,
    make_code_repair_tasks,
)
from agentic_rl.envs.splits import split_of
from agentic_rl.formats.chat import TagFormat
from agentic_rl.formats.tir import SweRLFormat
from agentic_rl.rewards.code import run_unit_tests
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool

TASKS = load_code_repair_tasks()


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, SandboxLimits(timeout_s=2.0, memory_mb=512)) as pool:
        yield pool


def test_shipped_tasks_are_well_formed():
    assert len(TASKS) >= 20
    assert len({t.task_id for t in TASKS}) == len(TASKS)
    for task in TASKS:
        fields = task.fields
        assert fields["buggy"] != fields["fixed"] and len(fields["tests"]) >= 3
        assert fields["path"].endswith(".py") and fields["buggy"].rstrip() in task.prompt


def test_buggy_files_fail_and_fixed_files_pass(pool):
    for task in TASKS:
        fields = task.fields
        fixed = run_unit_tests(pool, {fields["path"]: fields["fixed"]}, fields["tests"])
        buggy = run_unit_tests(pool, {fields["path"]: fields["buggy"]}, fields["tests"])
        assert all(fixed) and not all(buggy), task.task_id


def test_splits():
    train, held_out = make_code_repair_tasks("train", 40), make_code_repair_tasks("eval", 3)
    assert {t.task_id for t in train}.isdisjoint(t.task_id for t in held_out)
    assert all(split_of(t.task_id) == "eval" for t in held_out)
    assert len({t.task_id for t in train}) + len(
        {t.task_id for t in make_code_repair_tasks("eval", 40)}
    ) == len(TASKS)
    assert make_code_repair_tasks("all", 5, seed=1) == make_code_repair_tasks("all", 5, seed=1)
    with pytest.raises(ValueError):
        make_code_repair_tasks("test", 1)


def test_check_env_passes_with_the_swe_rl_reward():
    check_env(CodeRepairEnv(), list(TASKS))


def solve(env: CodeRepairEnv, text: str):
    env.reset(TASKS[0], seed=0)
    return env.step(SweRLFormat().parse(text, "stop"))


FIX = (
    "<think>empty list</think>\n<solution>\n```python\n### stats/basic.py\n<<<<<<< SEARCH\n"
    "    return sum(values) / len(values)\n=======\n"
    "    return sum(values) / len(values) if values else 0.0\n>>>>>>> REPLACE\n```\n</solution>"
)


def test_swe_rl_rewards():
    env = CodeRepairEnv()
    assert TASKS[0].task_id == "repair-mean-empty"
    result = solve(env, TASKS[0].answers[0])
    assert result.terminated and result.reward == 1.0 and result.info["success"] == 1.0
    partial = solve(env, FIX)
    assert 0.3 < partial.reward < 1.0 and partial.info["success"] == 0.0
    assert solve(env, "<solution>no thinking</solution>").reward == -1.0
    assert solve(env, "<solution>no thinking</solution>").info["format_error"] == 1


def test_unit_test_rewards(pool):
    env = CodeRepairEnv(reward="tests", runner=pool)
    result = solve(env, FIX)  # a different but correct fix passes every test
    assert result.reward == 1.0 and result.info["tests_passed"] == 3.0
    half = FIX.replace("if values else 0.0", "if values else None")
    assert solve(env, half).reward == pytest.approx(2 / 3)  # mean([]) == 0.0 fails
    assert solve(env, "<think>x</think><solution>prose</solution>").reward == -1.0


def test_expert_turn_renders_in_swe_rl_syntax():
    env = CodeRepairEnv()
    env.reset(TASKS[3], seed=0)
    action = TagFormat(env.tools).parse(env.expert_turn(), "stop")
    rendered = SweRLFormat().render_action(action)
    assert rendered.startswith("<think>") and rendered.endswith("</solution>")
    assert env.step(SweRLFormat().parse(rendered, "stop")).reward == 1.0

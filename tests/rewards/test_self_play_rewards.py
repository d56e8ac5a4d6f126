"""Absolute Zero: task validation in the sandbox, learnability / solver rewards (TRR++ is
tested in tests/algos/test_advantages.py)."""

from __future__ import annotations

import pytest

from agentic_rl.rewards.absolute_zero import (
    abduction_correct,
    deduction_correct,
    execute,
    induction_correct,
    learnability_reward,
    outputs_equal,
    program_problem,
    proposer_reward,
    solver_reward,
    validate_task,
)
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool

ADD = "def f(a, b):\n    return [a + b, a * b]\n"


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, SandboxLimits(timeout_s=2.0, memory_mb=512)) as pool:
        yield pool


@pytest.mark.parametrize(
    ("program", "problem"),
    [
        (ADD, None),
        ("def g(x):\n    return x\n", "the program must define a top-level function f()"),
        ("def f(:\n", "SyntaxError: invalid syntax"),
        ("import random\ndef f(x):\n    return random.random()\n", "banned module: random"),
        ("from os import path\ndef f(x):\n    return x\n", "banned module: os"),
        ("def f(x):\n    return open('x').read()\n", "banned call: open()"),
        ("def f(x):\n    return x.__class__\n", "banned attribute: __class__"),
        ("import math\ndef f(x):\n    return math.sqrt(x)\n", None),
    ],
)
def test_program_problem(program, problem):
    assert program_problem(program) == problem


def test_validate_task_gives_the_gold_output(pool):
    run = validate_task(pool, ADD, "3, 4")
    assert run.ok and run.output == "[7, 12]"
    assert not validate_task(pool, "def f(x):\n    return 1 / x\n", "0").ok
    assert validate_task(pool, ADD, "3,, 4").error == "the input is not a valid argument list"
    assert validate_task(pool, "import os\ndef f(x):\n    return x\n", "1").error.startswith(
        "banned"
    )


class FlakyRunner:
    """Prints a different value on each call: a non-deterministic program."""

    def __init__(self) -> None:
        self.calls = 0

    def run(self, code: str, timeout_s: float | None = None) -> ExecutionResult:
        self.calls += 1
        return ExecutionResult(f"{self.calls}\n", "", True, "", False, 0, 0.0)


def test_non_deterministic_programs_are_invalid():
    run = validate_task(FlakyRunner(), ADD, "1, 2")
    assert not run.ok and "non-deterministic" in run.error


def test_solver_checks(pool):
    assert deduction_correct("[7, 12]", "[7,12]")  # compared as values
    assert not deduction_correct("[7, 13]", "[7, 12]")
    assert outputs_equal("'a'", '"a"') and outputs_equal("not python", " not python ")
    assert abduction_correct(pool, ADD, "4, 3", "[7, 12]")  # any input that works counts
    assert not abduction_correct(pool, ADD, "1, 1", "[7, 12]")
    pairs = [("1, 2", "[3, 2]"), ("0, 5", "[5, 0]")]
    assert induction_correct(pool, ADD, pairs)
    assert not induction_correct(pool, "def f(a, b):\n    return [a + b, 0]\n", pairs)
    assert execute(pool, "def f():\n    print('noise')\n    return 1\n", "").output == "1"


@pytest.mark.parametrize(
    ("rates", "reward"),
    [(0.25, 0.75), ([1, 0, 0, 0], 0.75), ([1, 1, 1], 0.0), ([0, 0], 0.0), ([0.5, 1.0], 0.25)],
)
def test_learnability_reward(rates, reward):
    assert learnability_reward(rates) == pytest.approx(reward)


def test_composite_rewards():
    assert solver_reward(True) == 1.0
    assert solver_reward(False) == -0.5
    assert solver_reward(False, well_formed=False) == -1.0
    assert proposer_reward(True, [1, 0, 0, 0]) == 0.75
    assert proposer_reward(True, [1, 1]) == 0.0  # valid but trivially easy
    assert proposer_reward(False, []) == -0.5
    assert proposer_reward(False, [], well_formed=False) == -1.0

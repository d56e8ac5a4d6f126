"""check_env's branching checks (tree rollouts): replay of the action prefix, fork, opt-out."""

import copy

import pytest

from agentic_rl.envs.base import is_branchable
from agentic_rl.envs.check import EnvCheckError, check_env
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.types import Observation

TASKS = make_calculator_tasks("eval", 2, seed=0)


class Drifting(CalculatorEnv):
    """Tool results count the steps of the instance's whole life, not of the episode."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def step(self, action):
        self.steps += 1
        result = super().step(action)
        if result.observation is not None and action.kind == "tool":
            result.observation = Observation(content=str(self.steps), name="calc")
        return result


class OptedOut(Drifting):
    branchable = False


class Forking(CalculatorEnv):
    def fork(self):
        return copy.deepcopy(self)


class ShallowFork(CalculatorEnv):
    """A 'fork' that shares the episode's history list with the original."""

    def fork(self):
        return copy.copy(self)

    def step(self, action):
        result = super().step(action)
        if result.observation is not None:  # the observation reads the shared history
            content = str(len(self.history))
            result.observation = Observation(content=content, name=result.observation.name)
        return result


def test_an_env_that_does_not_replay_fails_naming_the_step():
    with pytest.raises(EnvCheckError, match="replay determinism failed: .*step 0 .*branchable"):
        check_env(Drifting(), TASKS)


def test_an_env_that_opts_out_skips_the_check():
    assert not is_branchable(OptedOut) and is_branchable(CalculatorEnv())
    skipped = check_env(OptedOut(), TASKS)
    assert "replay determinism (the env declares branchable = False)" in skipped


def test_fork_is_checked_where_defined():
    check_env(Forking(), TASKS)
    with pytest.raises(EnvCheckError, match="fork failed"):
        check_env(ShallowFork(), TASKS)

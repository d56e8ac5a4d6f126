"""Fixtures for the rollout tests: `forking_calculator`, the env both tree rollouts (Tree-GRPO's
rounds and ARPO's entropy branching) are checked with on their fork path."""

from __future__ import annotations

import copy

import pytest

from agentic_rl.envs.math.calculator import CalculatorEnv


@pytest.fixture
def forking_calculator() -> type[CalculatorEnv]:
    """A calculator env class whose instances copy themselves (`fork()`), so branches start from
    a copy instead of a replay; its `resets` counts the resets of all its instances from 0 in
    each test (the fork path resets the roots only)."""

    class ForkingCalculator(CalculatorEnv):
        resets = 0

        def reset(self, task, seed):
            type(self).resets += 1
            return super().reset(task, seed)

        def fork(self):
            return copy.deepcopy(self)

    return ForkingCalculator

"""RAP's search numbers, computed by hand: the UCT score and the step reward."""

from __future__ import annotations

import math

import pytest

from agentic_rl.algos.mcts import AGGREGATES, rap_reward, uct


def test_uct_by_hand():
    # Q + w * sqrt(ln N(parent) / N(child)): 0.5 + 1 * sqrt(ln 4 / 1)
    assert uct(0.5, 4, 1) == pytest.approx(0.5 + math.sqrt(math.log(4)))
    assert uct(0.5, 4, 1) == pytest.approx(1.67741, abs=1e-5)
    # visited twice, w = 2: 0.5 + 2 * sqrt(1.386294 / 2) = 0.5 + 1.665109
    assert uct(0.5, 4, 2, w_exp=2.0) == pytest.approx(2.165109, abs=1e-6)
    assert uct(0.5, 4, 0) == uct(0.5, 4, 1)  # unvisited counts as one visit
    assert uct(0.3, 0, 0) == 0.3  # a parent never visited: no bonus
    assert uct(0.3, 1, 1) == 0.3  # ln 1 = 0


def test_rap_reward_by_hand():
    # 0.5 * (-1.0 - 0.5 + ln 1) + 0.5 * 0.5 = -0.75 + 0.25
    assert rap_reward(-1.0, -0.5, 0.5, False) == pytest.approx(-0.5)
    # solved: the goal term is goal_reward: 0.5 * -1.5 + 0.5 * 100
    assert rap_reward(-1.0, -0.5, 1.0, True) == pytest.approx(49.25)
    # confidence 0.5 adds 0.5 * ln 0.5 = -0.346574
    assert rap_reward(-1.0, -0.5, 0.5, False, state_confidence=0.5) == pytest.approx(-0.846574)
    # alpha 1: only the model's terms
    assert rap_reward(-2.0, -1.0, 1.0, True, alpha=1.0) == pytest.approx(-3.0)


def test_aggregates():
    assert AGGREGATES["mean"]([1.0, 2.0, 6.0]) == 3.0
    assert AGGREGATES["sum"]([1.0, 2.0, 6.0]) == 9.0
    assert AGGREGATES["max"]([1.0, 2.0, 6.0]) == 6.0

"""The MCTS of RAP on crafted problems: each phase (selection, expansion, simulation,
back-propagation) is visible in the tree, and search finds what greedy choice misses."""

from __future__ import annotations

import pytest

from agentic_rl.rollout.mcts import MCTS, MCTSConfig, greedy_plan


class TwoPaths:
    """root -a-> A -a1-> A1 (nothing), root -b-> B -b1-> B1 (the goal, reward 10).

    `a` looks better at first sight (fast reward 1 vs 0) but costs -1 once taken."""

    FAST = {"a": 1.0, "b": 0.0, "a1": 1.0, "b1": 0.0}
    REWARD = {"a": -1.0, "b": 0.0, "a1": 0.0, "b1": 10.0}
    NEXT = {("root", "a"): "A", ("root", "b"): "B", ("A", "a1"): "A1", ("B", "b1"): "B1"}

    def __init__(self):
        self.world_model_calls = 0

    def init_state(self):
        return "root"

    def actions(self, state):
        return {"root": ["a", "b"], "A": ["a1"], "B": ["b1"]}.get(state, [])

    def fast_rewards(self, state, actions):
        return [(self.FAST[a], {"fast": self.FAST[a]}) for a in actions]

    def step(self, state, action):
        self.world_model_calls += 1
        return self.NEXT[(state, action)], {}

    def reward(self, state, action, next_state, details):
        return self.REWARD[action]

    def is_terminal(self, state):
        return state == "B1"


def test_greedy_takes_the_decoy_search_finds_the_goal():
    problem = TwoPaths()
    assert greedy_plan(problem, depth_limit=2) == ["a", "a1"]
    problem.world_model_calls = 0
    search = MCTS(problem, MCTSConfig(iterations=2, depth_limit=2, cum_reward="mean"))
    # iteration 1: expand root, simulate along the best fast reward (a, a1), back-propagate
    path = search.iterate()
    assert [n.action for n in path] == [None, "a", "a1"]
    a, b = search.root.children
    assert a.returns == [pytest.approx(-0.5)]  # mean(-1, 0)
    assert path[-1].returns == [0.0]
    assert search.root.returns == [pytest.approx(-1 / 3)]  # mean(0, -1, 0), root reward 0
    assert b.state is None and search.q(b) == 0.0  # unvisited: Q = fast reward
    # iteration 2: ln(1) = 0, no bonus: Q(a) = -0.5 < Q(b) = 0, so b is selected and expanded
    path = search.iterate()
    assert [n.action for n in path] == [None, "b", "b1"] and path[-1].terminal
    assert b.returns == [pytest.approx(5.0)]  # mean(0, 10)
    assert search.best_plan() == ["b", "b1"]
    assert problem.world_model_calls == 4  # every state predicted once


def test_follow_max_when_no_terminal_was_reached():
    problem = TwoPaths()
    search = MCTS(problem, MCTSConfig(iterations=1, depth_limit=2))
    assert search.search() == ["a", "a1"]  # no goal seen yet: the max-Q path


def test_exploration_weight_and_bad_settings():
    problem = TwoPaths()
    search = MCTS(problem, MCTSConfig(iterations=1, depth_limit=1, w_exp=1.0))
    search.iterate()  # root -> a (depth limit 1)
    search.iterate()  # Q(a) = mean(-1) = -1 < Q(b) = 0: b
    search.iterate()
    a, b = search.root.children
    assert (a.visits, b.visits) == (1, 2)
    with pytest.raises(ValueError, match="calc_q"):
        MCTS(problem, MCTSConfig(calc_q="median"))

"""Monte Carlo tree search over reasoning states, as RAP runs it (llm-reasoners' `MCTS`).

The search knows nothing of language models: a `SearchProblem` supplies the start state, the
actions of a state, a world model step (state, action -> next state, with how confident it
is), a terminal test, the cheap "fast reward" of each candidate action (scored at expansion,
before the world model is asked) and the full step reward (once the next state is known).
rollout/rap.py implements it with the policy model as world model and evaluator.

One iteration (RAP section 3.3):
- selection: from the root, follow the child with the highest UCT score (algos/mcts.py `uct`;
  an unvisited child's Q is its fast reward) until a leaf, a terminal node or the depth limit;
- expansion: ask the world model for the leaf's state (if not yet known), score its reward,
  enumerate its actions and give each child its fast reward;
- simulation: from there, keep taking the child with the highest fast reward (expanding as it
  goes) until a terminal node or the depth limit;
- back-propagation: walking back up the path, each node records the aggregate (`cum_reward`:
  mean or sum) of the rewards from itself to the end of the path; its Q is the max or mean
  (`calc_q`) of those records over its visits.

The output (`best_plan`): the path to a terminal node with the highest cumulative reward among
the visited nodes (llm-reasoners' "max_reward"), else, when no visited path reached a terminal
state, the path that follows the child with the highest Q from the root ("follow_max").
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentic_rl.algos.mcts import AGGREGATES, uct


class SearchProblem(Protocol):
    """What MCTS needs from a planning domain (states and actions are any hashable values)."""

    def init_state(self) -> Hashable: ...

    def actions(self, state: Hashable) -> list[Any]:
        """The candidate actions in `state` ([] = a dead end)."""
        ...

    def fast_rewards(self, state: Hashable, actions: list[Any]) -> list[tuple[float, dict]]:
        """Each action's fast reward and the details the full reward needs (batched)."""
        ...

    def step(self, state: Hashable, action: Any) -> tuple[Hashable, dict]:
        """The world model: the next state and details (e.g. its confidence)."""
        ...

    def reward(self, state: Hashable, action: Any, next_state: Hashable, details: dict) -> float:
        """The step reward of `action` from `state` to `next_state` (`details`: the fast reward's
        and the world model's details merged)."""
        ...

    def is_terminal(self, state: Hashable) -> bool: ...


@dataclass
class Node:
    """A node of the search tree: the state reached by `action` from the parent."""

    action: Any
    parent: Node | None
    fast_reward: float = 0.0
    details: dict = field(default_factory=dict)
    state: Hashable | None = None  # None until the world model is asked
    reward: float = 0.0
    terminal: bool = False
    children: list[Node] | None = None  # None until expanded
    returns: list[float] = field(default_factory=list)  # cum_reward of each visit
    depth: int = 0

    @property
    def visits(self) -> int:
        return len(self.returns)


@dataclass
class MCTSConfig:
    iterations: int = 10
    """Search iterations (RAP Blocksworld: 10, also 20)."""
    depth_limit: int = 6
    """The deepest a path goes (RAP: the problem's plan length)."""
    w_exp: float = 1.0
    """UCT exploration weight."""
    cum_reward: str = "mean"
    """How the rewards of a path's remainder become one return: mean | sum."""
    calc_q: str = "max"
    """How a node's returns over its visits become Q: max | mean."""


class MCTS:
    """RAP's search over one `SearchProblem` (see the module docstring)."""

    def __init__(self, problem: SearchProblem, cfg: MCTSConfig) -> None:
        for key in ("cum_reward", "calc_q"):
            if getattr(cfg, key) not in AGGREGATES:
                raise ValueError(f"{key} must be one of {sorted(AGGREGATES)}")
        self.problem = problem
        self.cfg = cfg
        self.cum = AGGREGATES[cfg.cum_reward]
        self.q_of = AGGREGATES[cfg.calc_q]
        self.root = Node(action=None, parent=None, state=problem.init_state())
        self.root.terminal = problem.is_terminal(self.root.state)

    def q(self, node: Node) -> float:
        """Q: the fast reward until visited, then `calc_q` of the node's returns."""
        return self.q_of(node.returns) if node.returns else node.fast_reward

    def _stop(self, node: Node) -> bool:
        return node.terminal or node.depth >= self.cfg.depth_limit

    def select_child(self, node: Node) -> Node:
        assert node.children
        parent = node.visits
        scores = [uct(self.q(c), parent, c.visits, self.cfg.w_exp) for c in node.children]
        return node.children[max(range(len(scores)), key=scores.__getitem__)]

    def _select(self) -> list[Node]:
        path, node = [self.root], self.root
        while node.children and not self._stop(node):
            node = self.select_child(node)
            path.append(node)
        return path

    def _evaluate(self, node: Node) -> None:
        """Ask the world model for the node's state (once) and score its step reward."""
        if node.state is None:
            assert node.parent is not None and node.parent.state is not None
            node.state, details = self.problem.step(node.parent.state, node.action)
            node.details = {**node.details, **details}
            node.reward = self.problem.reward(
                node.parent.state, node.action, node.state, node.details
            )
            node.terminal = self.problem.is_terminal(node.state)

    def _expand(self, node: Node) -> None:
        self._evaluate(node)
        if node.terminal or node.children is not None or node.depth >= self.cfg.depth_limit:
            return
        actions = self.problem.actions(node.state)
        scored = self.problem.fast_rewards(node.state, actions) if actions else []
        node.children = [
            Node(action=a, parent=node, fast_reward=r, details=d, depth=node.depth + 1)
            for a, (r, d) in zip(actions, scored, strict=True)
        ]

    def _simulate(self, path: list[Node]) -> None:
        node = path[-1]
        while True:
            self._expand(node)
            if self._stop(node) or not node.children:
                return
            node = max(node.children, key=lambda c: c.fast_reward)
            path.append(node)

    def _back_propagate(self, path: list[Node]) -> float:
        rewards: list[float] = []
        ret = -math.inf
        for node in reversed(path):
            rewards.append(node.reward)
            ret = self.cum(rewards[::-1])
            node.returns.append(ret)
        return ret

    def iterate(self) -> list[Node]:
        """One iteration (selection, expansion, simulation, back-propagation); its path."""
        path = self._select()
        self._evaluate(path[-1])  # a leaf at the depth limit is still predicted and scored
        if not self._stop(path[-1]):
            self._expand(path[-1])
            self._simulate(path)
        self._back_propagate(path)
        return path

    def search(self) -> list[Any]:
        """Run `iterations` iterations; the chosen plan (actions from the root)."""
        for _ in range(self.cfg.iterations):
            self.iterate()
        return self.best_plan()

    def best_plan(self) -> list[Any]:
        """The visited path to a terminal node with the highest cumulative reward, else the
        follow-max-Q path (module docstring)."""
        best: tuple[float, list[Node]] = (-math.inf, [])

        def dfs(node: Node, path: list[Node]) -> None:
            nonlocal best
            if node.terminal and path:
                value = self.cum([n.reward for n in path])
                if value > best[0]:
                    best = (value, list(path))
                return
            for child in node.children or []:
                if child.state is not None:
                    dfs(child, [*path, child])

        dfs(self.root, [])
        if best[1]:
            return [n.action for n in best[1]]
        plan, node = [], self.root
        while node.children:
            visited = [c for c in node.children if c.state is not None]
            if not visited:
                break
            node = max(visited, key=self.q)
            plan.append(node.action)
        return plan


def greedy_plan(problem: SearchProblem, depth_limit: int) -> list[Any]:
    """The plan that always takes the action with the highest fast reward (no search): what
    the same scorer picks without MCTS, for comparisons and tests."""
    state, plan = problem.init_state(), []
    for _ in range(depth_limit):
        if problem.is_terminal(state):
            break
        actions = problem.actions(state)
        if not actions:
            break
        scored = problem.fast_rewards(state, actions)
        best = max(range(len(actions)), key=lambda i: scored[i][0])
        plan.append(actions[best])
        state, _ = problem.step(state, actions[best])
    return plan


def plan_states(problem: SearchProblem, plan: Sequence[Any]) -> list[Hashable]:
    """The states the world model predicts along `plan` (the start state first)."""
    states = [problem.init_state()]
    for action in plan:
        states.append(problem.step(states[-1], action)[0])
    return states

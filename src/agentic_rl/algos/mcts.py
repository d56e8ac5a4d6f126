"""The numbers of RAP's Monte Carlo tree search (Hao et al. 2023, "Reasoning with Language Model
is Planning with World Model"; its code: llm-reasoners' MCTS and Blocksworld reward): UCT
selection, the step reward, and how a node's value is built from the rewards below it.

Pure Python on floats; the search itself is rollout/mcts.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def uct(q: float, parent_visits: int, visits: int, w_exp: float = 1.0) -> float:
    """The UCT score of a child (RAP eq. 2, llm-reasoners `_uct`):

        Q(s, a) + w_exp * sqrt(ln N(s) / max(1, N(c(s, a))))

    q: the child's value Q(s, a); parent_visits: N(s), the parent's visit count (>= 1 once the
    parent was selected); visits: N(c(s, a)), the child's. An unvisited child counts as one
    visit (llm-reasoners' `max(1, ...)`), so its score is its (fast-reward) Q plus the full
    exploration bonus. Example: q = 0.5, N(s) = 4, N(c) = 1, w_exp = 1 ->
    0.5 + sqrt(ln 4) = 0.5 + 1.1774 = 1.6774."""
    if parent_visits < 1:
        return q
    return q + w_exp * math.sqrt(math.log(parent_visits) / max(1, visits))


def rap_reward(
    action_logprob: float,
    self_eval_logprob: float,
    goal_progress: float,
    solved: bool,
    state_confidence: float = 1.0,
    alpha: float = 0.5,
    goal_reward: float = 100.0,
) -> float:
    """RAP's step reward for taking an action and reaching a state (Blocksworld, llm-reasoners
    `BWConfig.reward`):

        r = alpha * (log p(a | s) + log p("good" | s, a) + log c(s'))
            + (1 - alpha) * (goal_reward if s' is the goal else fraction of goal clauses true)

    action_logprob: log p(a | s), the action's likelihood under the few-shot prompt (RAP's
    "likelihood of the action"); self_eval_logprob: log p("good"), the model judging its own
    step (RAP's "self-evaluation"); state_confidence c(s') in (0, 1]: how sure the world model
    is of the predicted state (RAP's "confidence of the state"; 1 with an exact simulator, so
    its log adds 0); goal_progress and solved: RAP's task-specific heuristic, closeness to the
    goal. Example: -1.0, -0.5, 0.5, False, c = 1 -> 0.5 * -1.5 + 0.5 * 0.5 = -0.5."""
    confidence = math.log(max(state_confidence, 1e-9))
    goal = goal_reward if solved else goal_progress
    return alpha * (action_logprob + self_eval_logprob + confidence) + (1 - alpha) * goal


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def total(values: Sequence[float]) -> float:
    return float(sum(values))


# How a path's rewards r_t .. r_T become one return (`cum_reward`) and how a node's returns over
# its visits become Q (`calc_q`). RAP (Blocksworld): the mean of future rewards, Q = their max
# or mean over visits; llm-reasoners defaults: cum_reward = sum, calc_q = mean.
AGGREGATES: dict[str, Callable[[Sequence[float]], float]] = {
    "mean": mean,
    "sum": total,
    "max": lambda values: max(values) if values else 0.0,
}

"""Blocksworld (the planning benchmark of RAP, Hao et al. 2023) as an env: generated problems,
KnownSelf's knowledge rule and `BlocksworldEnv`. The domain itself (facts, state text, the four
STRIPS actions, goal tests, the BFS planner `solve` and the exact plan checker `check_plan`) is
in envs/games/blocksworld_domain.py.

Problems (`make_blocksworld_tasks`) are seeded random pairs of configurations of `num_blocks`
blocks; difficulty is the optimal plan length, found by breadth-first search (`solve`), and a
problem is kept when it lies in [min_plan, max_plan]. The BFS plan is the gold answer, the
scripted expert (replanned from wherever the agent is) and, with `check_plan`, the verifier.
Train and eval problems are disjoint by a hash of the problem.

The env (`BlocksworldEnv`) is a `DiscreteActionEnv`: the action names are every action over the
blocks (32 with 4 blocks), one per turn by default; an action whose preconditions do not hold is
a no-op (the state shown again); reaching the goal gives reward 1 and ends the episode. For
planners (rollout/rap.py) it also works on state *text*: `parse_state` reads facts back from
text (e.g. a language model's predicted next state), `legal_actions` enumerates by rule, and
`goal_progress` is the fraction of goal clauses that hold. KnownSelf's knowledge tool
(`knowledge=True`): `<knowledge>topic</knowledge>` returns a "When ..., the agent should ..."
rule about the current state (`knowledge_rule`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from agentic_rl.envs.discrete import DiscreteActionEnv
from agentic_rl.envs.games.blocksworld_domain import (
    COLORS,
    Fact,
    State,
    action_names,
    apply_action,
    blocks_of,
    goal_progress,
    goal_reached,
    goal_text,
    legal_actions,
    parse_action_name,
    parse_state,
    solve,
    state_text,
)
from agentic_rl.envs.knowledge import KNOWLEDGE_HINT, KnowledgeMixin
from agentic_rl.envs.splits import split_of
from agentic_rl.types import Task

Split = Literal["train", "eval"]


SYSTEM_PROMPT = (
    "I am playing with a set of blocks where I need to arrange the blocks into stacks. "
    "I can pick up a block, unstack a block from on top of another block, put down a block, "
    "and stack a block on top of another block. I can only pick up or unstack one block at a "
    "time, only a clear block (no block on top of it), and only with an empty hand. I can only "
    "stack a block I hold on top of a clear block.\n"
    "Each turn, write one action like <action>unstack the red block from on top of the blue "
    "block</action>."
)


# ---------------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------------


def random_configuration(rng: random.Random, blocks: Sequence[str]) -> State:
    """Blocks dealt into random stacks, hand empty."""
    order = list(blocks)
    rng.shuffle(order)
    stacks: list[list[str]] = []
    for block in order:
        if stacks and rng.random() < 0.6:
            rng.choice(stacks).append(block)
        else:
            stacks.append([block])
    facts: set[Fact] = {("handempty",)}
    for stack in stacks:
        facts.add(("ontable", stack[0]))
        facts.update(("on", upper, lower) for lower, upper in zip(stack, stack[1:], strict=False))
        facts.add(("clear", stack[-1]))
    return frozenset(facts)


def problem_task(init: State, goal: Iterable[Fact], task_id: str, plan: list[str]) -> Task:
    goal = sorted(goal)
    return Task(
        task_id=task_id,
        prompt=f"As initial conditions I have that, {state_text(init)}.\nMy goal is to have that {goal_text(goal)}.",
        answers=["\n".join(plan)],
        fields={
            "init": [list(f) for f in sorted(init)],
            "goal": [list(f) for f in goal],
            "plan_length": len(plan),
        },
    )


def task_problem(task: Task) -> tuple[State, list[Fact]]:
    """(initial state, goal clauses) of a Blocksworld task."""
    return (
        frozenset(tuple(f) for f in task.fields["init"]),
        [tuple(f) for f in task.fields["goal"]],
    )


def make_blocksworld_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    num_blocks: int = 4,
    min_plan: int = 2,
    max_plan: int = 6,
) -> list[Task]:
    """`n` problems over `num_blocks` blocks whose optimal plan takes `min_plan`..`max_plan`
    actions (RAP's difficulty: 2, 4, 6 steps), spread evenly over the plan lengths of that
    range that occur; train and eval disjoint."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if not 2 <= num_blocks <= len(COLORS):
        raise ValueError(f"num_blocks must be in 2..{len(COLORS)}, got {num_blocks}")
    if not 1 <= min_plan <= max_plan:
        raise ValueError(f"need 1 <= min_plan <= max_plan, got {min_plan}, {max_plan}")
    blocks = COLORS[:num_blocks]
    rng = random.Random(f"blocksworld/{split}/{seed}/{num_blocks}")
    by_length: dict[int, list[tuple[State, list[Fact], list[str]]]] = {}
    seen: set[str] = set()
    for _ in range(200 * n + 2000):
        if sum(len(v) for v in by_length.values()) >= 4 * n:
            break
        init, target = random_configuration(rng, blocks), random_configuration(rng, blocks)
        goal = sorted(f for f in target if f[0] == "on")
        if not goal or goal_reached(init, goal):
            continue
        key = state_text(init) + "|" + goal_text(goal)
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        plan = solve(init, goal)
        if plan is None or not min_plan <= len(plan) <= max_plan:
            continue
        by_length.setdefault(len(plan), []).append((init, goal, plan))
    lengths = sorted(by_length)
    tasks: list[Task] = []
    k = 0
    while len(tasks) < n and any(by_length.values()):  # round-robin over the lengths
        pool = by_length[lengths[k % len(lengths)]]
        k += 1
        if pool:
            init, goal, plan = pool.pop(0)
            tasks.append(problem_task(init, goal, f"blocksworld-{split}-{seed}-{len(tasks)}", plan))
    if len(tasks) < n:
        raise RuntimeError(
            f"could not generate {n} distinct {split} Blocksworld problems with {num_blocks} "
            f"blocks and plans of {min_plan}-{max_plan} actions (got {len(tasks)})"
        )
    return tasks


# ---------------------------------------------------------------------------------------------
# Knowledge (KnownSelf's knowledge tool)
# ---------------------------------------------------------------------------------------------


def knowledge_rule(state: State, goal: Sequence[Fact]) -> str:
    """A "When ..., the agent should ..." rule about `state`, chosen by the next step of an
    optimal plan (the knowledge base is small and rule-based, as KnownSelf's; choosing the rule
    by the optimal plan makes the selector an oracle, which the recipe says)."""
    plan = solve(state, goal)
    if not plan:
        return "When every goal clause already holds, the agent should stop."
    parsed = parse_action_name(plan[0])
    assert parsed is not None
    verb, x = parsed[0], parsed[1]
    if verb == "unstack":
        return (
            f"When the {x} block sits on the {parsed[2]} block and is in the way, the agent "
            f"should first unstack the {x} block from on top of the {parsed[2]} block."
        )
    if verb == "pick up":
        return (
            f"When the hand is empty and the {x} block must move, the agent should pick up "
            f"the {x} block."
        )
    if verb == "put down":
        return (
            f"When the hand holds the {x} block and its place is not ready, the agent should "
            f"put down the {x} block."
        )
    return (
        f"When the hand holds the {x} block and the {parsed[2]} block is clear, the agent "
        f"should stack the {x} block on top of the {parsed[2]} block."
    )


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------


class BlocksworldEnv(KnowledgeMixin, DiscreteActionEnv):
    """Blocksworld: stack the blocks so every goal clause holds (RAP's problems; see module)."""

    # The problem's facts: a task-file row needs it (envs/base.py).
    task_fields = ("init", "goal")

    def __init__(
        self,
        num_blocks: int = 4,
        max_actions_per_turn: int = 1,
        max_steps: int = 12,
        format_penalty: float = 0.1,
        knowledge: bool = False,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # actions are not tool calls; accepted for a uniform constructor
        if not 2 <= num_blocks <= len(COLORS):
            raise ValueError(f"num_blocks must be in 2..{len(COLORS)}, got {num_blocks}")
        self.blocks = list(COLORS[:num_blocks])
        super().__init__(action_names(self.blocks), max_actions_per_turn, max_steps, format_penalty)
        if knowledge:
            self.enable_knowledge()
        self.state: State = frozenset()
        self.goal: list[Fact] = []
        self._plan: list[str] = []

    def system_prompt(self) -> str:
        prompt = SYSTEM_PROMPT
        if self.has_knowledge:
            prompt += KNOWLEDGE_HINT
        return prompt

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the problem fixes everything
        self.state, self.goal = task_problem(task)
        unknown = set(blocks_of(self.state)) - set(self.blocks)
        if unknown:
            raise ValueError(
                f"task {task.task_id} uses blocks {sorted(unknown)} beyond num_blocks="
                f"{len(self.blocks)}: set env option num_blocks for both env and tasks"
            )
        self._plan = []

    def _apply(self, index: int) -> tuple[float, bool, bool]:
        nxt = apply_action(self.state, self.action_names[index])
        if nxt is None:  # preconditions fail: a no-op, the state is shown again
            return 0.0, False, False
        self.state = nxt
        done = goal_reached(self.state, self.goal)
        return (1.0 if done else 0.0), done, False

    def _success(self) -> bool:
        return goal_reached(self.state, self.goal)

    def state_text(self) -> str:
        return f"I have that, {state_text(self.state)}.\nMy goal is to have that {goal_text(self.goal)}."

    def anchor_key(self) -> Any:
        return self.state

    # -- a domain simulated in text, for planners (rollout/rap.py `TextDomain`) -----------
    planning_intro = (
        "I am playing with a set of blocks. I can pick up a clear block from the table, unstack "
        "a clear block from on top of another block, put down the block I hold, or stack the "
        "block I hold on top of a clear block. I hold at most one block."
    )
    planning_example = (
        "the blue block is clear, the hand is empty, the blue block is on top of the red "
        "block, the red block is on the table",
        "the red block is on top of the blue block",
        "unstack the blue block from on top of the red block",
        "the red block is clear, the hand is holding the blue block, the red block is on the table",
    )
    """(state, goal, a good next action, the state after it): the one-shot example of the
    planner's prompts."""

    def plan_root(self) -> str:
        """The current state as planning text (RAP's facts)."""
        return state_text(self.state)

    def plan_goal(self) -> str:
        return goal_text(self.goal)

    def plan_parse(self, text: str) -> str:
        """Canonical state text of any text (a world model's prediction); "" if no fact."""
        return state_text(parse_state(text, self.blocks))

    def plan_actions(self, state: str) -> list[str]:
        """The actions whose preconditions hold in the state a text describes (by rule)."""
        return legal_actions(parse_state(state, self.blocks), self.blocks)

    def plan_progress(self, state: str) -> tuple[float, bool]:
        """(fraction of goal clauses the state text makes true, whether all are)."""
        facts = parse_state(state, self.blocks)
        return goal_progress(facts, self.goal), goal_reached(facts, self.goal)

    def plan_transition(self, state: str, action: str) -> str:
        """The exact simulator on text ("" when the action does not apply)."""
        nxt = apply_action(parse_state(state, self.blocks), action)
        return "" if nxt is None else state_text(nxt)

    def knowledge(self) -> str:
        """The knowledge tool's answer in the current state (KnownSelf's labelling uses it)."""
        return knowledge_rule(self.state, self.goal)

    def expert_turn(self) -> str:
        """The next action(s) of an optimal plan from the current state (BFS, replanned when the
        state left the plan)."""
        if self.done:
            return self.expert_text([])
        plan = self._plan if self._plan and self._plan_from == self.state else None
        if plan is None:
            plan = solve(self.state, self.goal)
            if plan is None:
                raise RuntimeError("the expert found no plan from this state")
        chosen = plan[: self.expert_budget()]
        state = self.state
        for name in chosen:
            state = apply_action(state, name)  # type: ignore[assignment]
        self._plan, self._plan_from = plan[len(chosen) :], state
        return self.expert_text([self.action_names.index(name) for name in chosen])

    _plan_from: State | None = None

"""The Blocksworld domain (the planning benchmark of RAP, Hao et al. 2023) as pure logic, with
no env: facts and their text, the four STRIPS actions, goal tests, an optimal BFS planner and
an exact plan checker. envs/games/blocksworld.py builds problems, the knowledge rule and the env on it.

A state is a set of STRIPS facts over coloured blocks, written as RAP writes them: "the red
block is clear", "the hand is empty", "the red block is on top of the blue block", "the blue
block is on the table", "the hand is holding the red block" (`state_text`; `parse_state` reads
facts back from any text, e.g. a language model's predicted next state). Four actions, with
their exact preconditions: "pick up the X block" (X clear, on the table, hand empty), "unstack
the X block from on top of the Y block" (X clear and on Y, hand empty), "put down the X block"
(holding X), "stack the X block on top of the Y block" (holding X, Y clear); `apply_action`
applies one, `legal_actions` enumerates those that apply by rule (RAP's expansion). A goal is a
set of "X on top of Y" clauses (RAP's goals); it is reached when every clause holds
(`goal_reached`), and `goal_progress` is the fraction that does.

`solve` finds an optimal (fewest actions) plan by breadth-first search; `check_plan` checks a
plan exactly (every action applicable in turn, goal reached at the end).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence

Fact = tuple[
    str, ...
]  # ("on", x, y) | ("ontable", x) | ("clear", x) | ("holding", x) | ("handempty",)
State = frozenset[Fact]

COLORS = ("red", "blue", "orange", "yellow", "white", "magenta", "black", "cyan")
MAX_BFS_STATES = 200_000


# ---------------------------------------------------------------------------------------------
# Facts and text
# ---------------------------------------------------------------------------------------------


def fact_text(fact: Fact) -> str:
    """One fact in RAP's words."""
    kind = fact[0]
    if kind == "on":
        return f"the {fact[1]} block is on top of the {fact[2]} block"
    if kind == "ontable":
        return f"the {fact[1]} block is on the table"
    if kind == "clear":
        return f"the {fact[1]} block is clear"
    if kind == "holding":
        return f"the hand is holding the {fact[1]} block"
    return "the hand is empty"


_ORDER = {"clear": 0, "handempty": 1, "holding": 1, "on": 2, "ontable": 3}


def state_text(state: Iterable[Fact]) -> str:
    """A state as one sentence, facts in a fixed order (clear, hand, on, table)."""
    return ", ".join(fact_text(f) for f in sorted(state, key=lambda f: (_ORDER[f[0]], f)))


def goal_text(goal: Iterable[Fact]) -> str:
    return " and ".join(fact_text(f) for f in sorted(goal))


_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(\w+) block is on top of the (\w+) block"), "on"),
    (re.compile(r"(\w+) block is on the table"), "ontable"),
    (re.compile(r"(\w+) block is clear"), "clear"),
    (re.compile(r"(?:holding|hold) the (\w+) block"), "holding"),
    (re.compile(r"hand is empty"), "handempty"),
)


def parse_state(text: str, blocks: Sequence[str] = COLORS) -> State:
    """The facts a text states (RAP's phrasing; any order, unknown words ignored). A planner
    reads a language model's predicted next state with it, so it never raises: text without a
    recognisable fact gives the empty state (no legal action)."""
    facts: set[Fact] = set()
    lowered = text.lower()
    known = set(blocks)
    for pattern, kind in _PATTERNS:
        for match in pattern.finditer(lowered):
            names = match.groups()
            if all(name in known for name in names) and len(set(names)) == len(names):
                facts.add((kind, *names))
    return frozenset(facts)


def action_names(blocks: Sequence[str]) -> list[str]:
    """Every action over `blocks`, in a fixed order (the env's action list)."""
    names = [f"pick up the {x} block" for x in blocks]
    names += [f"put down the {x} block" for x in blocks]
    names += [
        f"unstack the {x} block from on top of the {y} block"
        for x in blocks
        for y in blocks
        if x != y
    ]
    names += [
        f"stack the {x} block on top of the {y} block" for x in blocks for y in blocks if x != y
    ]
    return names


_ACTION = re.compile(
    r"^(pick up|put down|unstack|stack) the (\w+) block(?: (?:from )?on top of the (\w+) block)?$"
)


def parse_action_name(name: str) -> tuple[str, ...] | None:
    """("pick up", x) | ("put down", x) | ("unstack", x, y) | ("stack", x, y), or None."""
    match = _ACTION.match(name.strip().lower())
    if not match:
        return None
    verb, x, y = match.groups()
    if (verb in ("unstack", "stack")) != (y is not None):
        return None
    return (verb, x) if y is None else (verb, x, y)


def apply_action(state: State, name: str) -> State | None:
    """The state after action `name` (STRIPS), or None when its preconditions do not hold."""
    parsed = parse_action_name(name)
    if parsed is None:
        return None
    verb, x = parsed[0], parsed[1]
    s = set(state)
    if verb == "pick up":
        need = {("clear", x), ("ontable", x), ("handempty",)}
        if not need <= s:
            return None
        return frozenset((s - need) | {("holding", x)})
    if verb == "put down":
        if ("holding", x) not in s:
            return None
        return frozenset((s - {("holding", x)}) | {("clear", x), ("ontable", x), ("handempty",)})
    y = parsed[2]
    if verb == "unstack":
        need = {("clear", x), ("on", x, y), ("handempty",)}
        if not need <= s:
            return None
        return frozenset((s - need) | {("holding", x), ("clear", y)})
    need = {("holding", x), ("clear", y)}  # stack
    if not need <= s:
        return None
    return frozenset((s - need) | {("on", x, y), ("clear", x), ("handempty",)})


def blocks_of(state: Iterable[Fact]) -> list[str]:
    """The blocks a state mentions, in COLORS order."""
    named = {name for fact in state for name in fact[1:]}
    return [c for c in COLORS if c in named] + sorted(named - set(COLORS))


def legal_actions(state: State, blocks: Sequence[str] | None = None) -> list[str]:
    """The actions whose preconditions hold in `state`, enumerated by rule (RAP's expansion)."""
    blocks = list(blocks) if blocks is not None else blocks_of(state)
    return [a for a in action_names(blocks) if apply_action(state, a) is not None]


def goal_reached(state: State, goal: Iterable[Fact]) -> bool:
    return set(goal) <= state


def goal_progress(state: State, goal: Sequence[Fact]) -> float:
    """The fraction of goal clauses that hold (RAP's closeness-to-goal term)."""
    goal = list(goal)
    return sum(f in state for f in goal) / len(goal) if goal else 1.0


def solve(state: State, goal: Iterable[Fact], max_states: int = MAX_BFS_STATES) -> list[str] | None:
    """An optimal plan (fewest actions) by breadth-first search; [] if the goal holds, None if
    unreachable within `max_states` states. Deterministic (actions in `action_names` order)."""
    goal = frozenset(goal)
    if goal <= state:
        return []
    blocks = blocks_of(state)
    parent: dict[State, tuple[State, str] | None] = {state: None}
    queue = deque([state])
    while queue:
        current = queue.popleft()
        for name in legal_actions(current, blocks):
            nxt = apply_action(current, name)
            assert nxt is not None
            if nxt in parent:
                continue
            parent[nxt] = (current, name)
            if goal <= nxt:
                plan = []
                node: State = nxt
                while parent[node] is not None:
                    node, step = parent[node]  # type: ignore[misc]
                    plan.append(step)
                return plan[::-1]
            if len(parent) > max_states:
                return None
            queue.append(nxt)
    return None


def check_plan(state: State, goal: Iterable[Fact], plan: Sequence[str]) -> tuple[bool, bool]:
    """The exact plan checker: (every action applicable in turn, goal reached at the end)."""
    for name in plan:
        nxt = apply_action(state, name)
        if nxt is None:
            return False, False
        state = nxt
    return True, goal_reached(state, goal)

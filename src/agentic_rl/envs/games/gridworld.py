"""A tiny multi-step grid world for step-level credit assignment (GiGPO, RAGEN-style envs).

A 5 x 5 grid with a few walls; the agent moves one cell per turn with `<action>up</action>`
(down, left, right) until it stands on the goal (reward 1). The observation says where the goal
is relative to the agent and which moves are blocked, e.g. "The goal is 2 down and 1 right.
Blocked: up, left." Moving into a wall or the border is a legal move that leaves the agent in
place; a malformed or unknown move costs `format_penalty` (0.1, as in GiGPO's setup) and shows
the same state again. `<answer>` ends the episode without reaching the goal (reward 0).

`distance_reward` c > 0 adds a turn reward for progress: c x (d_before - d_after), d the
shortest-path length to the goal around the walls, so a move that brings the agent one step
closer earns c, one that leads away costs c, a move into a wall earns 0. This is
potential-based shaping (Ng, Harada & Russell 1999, potential -c x d, gamma = 1): the optimal
policy is unchanged and an episode's shaping sums to c x (d_start - d_end), c x d_start on
reaching the goal. It gives each turn its own signal, which turn-level credit (MT-GRPO,
Turn-PPO; algos/turns.py) reads; with c = 0 (the default) only arrival and format are scored.

Everything is deterministic given the task: the layout lives in `task.fields`, so envs reset
with one task (and one seed, as `rollout.loop.start_episodes` gives a group) start from the same
state. Each observation carries `anchor` = its state text, which GiGPO groups steps on: the same
text means the same cell of the same layout. Tasks keep the shortest path between 2 and 6 moves
so a scripted BFS expert (`expert_turn`) solves every task within `check_env`'s turn limit.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any, Literal

from agentic_rl.envs.base import check_steppable
from agentic_rl.envs.splits import split_of
from agentic_rl.tools.base import EnvActionTool
from agentic_rl.types import Action, Observation, StepResult, Task

Split = Literal["train", "eval"]
Cell = tuple[int, int]

SIZE = 5
NUM_WALLS = 3
MIN_PATH, MAX_PATH = 2, 6
MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

SYSTEM_PROMPT = (
    "You are in a grid world and must walk to the goal. Each turn, write exactly one move: "
    "<action>up</action>, <action>down</action>, <action>left</action> or "
    "<action>right</action>. Then you see where the goal is and which moves are blocked."
)


MOVE_TOOL = EnvActionTool(
    "action", "Move one cell: up, down, left or right.", "direction", choices=tuple(MOVES)
)
"""The move, applied by `GridWorldEnv.step` (so chat formats parse `<action>dir</action>`)."""


def shortest_path(walls: set[Cell], start: Cell, goal: Cell, size: int = SIZE) -> list[str]:
    """The moves of a shortest path from start to goal (BFS, fixed move order: deterministic);
    [] if start == goal; raises ValueError if the goal is unreachable."""
    previous: dict[Cell, tuple[Cell, str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves: list[str] = []
            while previous[cell] is not None:
                cell, move = previous[cell]  # type: ignore[misc]
                moves.append(move)
            return moves[::-1]
        for move, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt in previous or nxt in walls or not inside(nxt, size):
                continue
            previous[nxt] = (cell, move)
            queue.append(nxt)
    raise ValueError(f"goal {goal} unreachable from {start}")


def layout_of(task: Task) -> tuple[set[Cell], Cell, Cell]:
    """The walls, start and goal cells a grid-world task's `fields` hold."""
    walls = {(int(r), int(c)) for r, c in task.fields["walls"]}
    start = (int(task.fields["start"][0]), int(task.fields["start"][1]))
    goal = (int(task.fields["goal"][0]), int(task.fields["goal"][1]))
    return walls, start, goal


def inside(cell: Cell, size: int) -> bool:
    return 0 <= cell[0] < size and 0 <= cell[1] < size


def describe(walls: set[Cell], position: Cell, goal: Cell, size: int = SIZE) -> str:
    """The state text: the goal relative to the agent and the blocked moves."""
    dr, dc = goal[0] - position[0], goal[1] - position[1]
    parts = []
    if dr:
        parts.append(f"{abs(dr)} {'down' if dr > 0 else 'up'}")
    if dc:
        parts.append(f"{abs(dc)} {'right' if dc > 0 else 'left'}")
    blocked = [
        move
        for move, (mr, mc) in MOVES.items()
        if (position[0] + mr, position[1] + mc) in walls
        or not inside((position[0] + mr, position[1] + mc), size)
    ]
    where = " and ".join(parts) if parts else "here"
    return f"The goal is {where}. Blocked: {', '.join(blocked) or 'none'}."


def make_gridworld_tasks(split: Split, n: int, seed: int = 0) -> list[Task]:
    """`n` distinct layouts for `split` (train and eval layouts are disjoint by a hash).

    Each task: `fields = {"walls", "start", "goal"}` (cells as [row, col]), `answers` = the
    shortest path as text ("down right"), `prompt` = the first observation."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"gridworld/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        walls_list = rng.sample(cells, NUM_WALLS)
        free = [cell for cell in cells if cell not in walls_list]
        start, goal = rng.sample(free, 2)
        walls = set(walls_list)
        key = f"{sorted(walls)}|{start}|{goal}"
        if key in seen or split_of(key) != split:
            continue
        try:
            path = shortest_path(walls, start, goal)
        except ValueError:
            continue
        if not MIN_PATH <= len(path) <= MAX_PATH:
            continue
        seen.add(key)
        tasks.append(
            Task(
                task_id=f"grid-{split}-{seed}-{len(tasks)}",
                prompt=describe(walls, start, goal),
                answers=[" ".join(path)],
                fields={
                    "walls": [list(w) for w in sorted(walls)],
                    "start": list(start),
                    "goal": list(goal),
                },
            )
        )
    raise RuntimeError(f"could not generate {n} distinct {split} grid-world layouts")


class GridWorldEnv:
    """Walk to the goal; reward 1 on arrival, -format_penalty per malformed move, and with
    `distance_reward` c the progress of each move, c x (d_before - d_after)."""

    # The layout: a task-file row needs it (envs/base.py).
    task_fields = ("walls", "start", "goal")

    anchor_states = True  # every observation carries `anchor` (GiGPO groups steps on it)

    def __init__(
        self,
        format_penalty: float = 0.1,
        distance_reward: float = 0.0,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # moves are not tool calls; accepted for a uniform constructor
        if not (math.isfinite(distance_reward) and distance_reward >= 0):
            raise ValueError(f"distance_reward must be a number >= 0, got {distance_reward}")
        self.tools: list[Any] = [MOVE_TOOL]
        self.format_penalty = format_penalty
        self.distance_reward = float(distance_reward)
        self.walls: set[Cell] = set()
        self.position: Cell = (0, 0)
        self.goal: Cell = (0, 0)
        self.task: Task | None = None
        self.done = False

    def state_text(self) -> str:
        return describe(self.walls, self.position, self.goal)

    def reset(self, task: Task, seed: int) -> Observation:
        """Start on `task`'s layout; `seed` is unused (the layout fixes everything)."""
        del seed
        self.task = task
        self.walls, self.position, self.goal = layout_of(task)
        self.done = False
        if self.distance_reward:
            try:
                self.distance()
            except ValueError as err:  # a user's own layout (a task file) may wall it off
                raise ValueError(
                    f"task {task.task_id}: {err}; distance_reward needs a reachable goal"
                ) from err
        state = self.state_text()
        return Observation(
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": state},
            ],
            anchor=state,
        )

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "answer":
            self.done = True
            return StepResult(None, 0.0, terminated=True, info={"answered": 1, "success": 0.0})
        if action.kind != "tool":
            return self._invalid(action.error or "no move in this turn")
        if action.name != MOVE_TOOL.name:
            return self._invalid(f"unknown action '{action.name}'")
        direction = str(action.arguments.get("direction", "")).strip().lower()
        if direction not in MOVES:
            return self._invalid(f"'{direction}' is not a move")
        dr, dc = MOVES[direction]
        target = (self.position[0] + dr, self.position[1] + dc)
        before = self.distance() if self.distance_reward else 0
        if target not in self.walls and inside(target, SIZE):
            self.position = target
        info: dict[str, Any] = {"tool_call": 1}
        progress = 0.0
        if self.distance_reward:
            progress = self.distance_reward * (before - self.distance())
            info["env/progress"] = progress  # summed over the episode: its shaping
        if self.position == self.goal:
            self.done = True
            return StepResult(None, 1.0 + progress, terminated=True, info={**info, "success": 1.0})
        state = self.state_text()
        return StepResult(
            Observation(content=state, name=MOVE_TOOL.name, anchor=state), progress, info=info
        )

    def distance(self) -> int:
        """Moves left on a shortest path from the agent's cell to the goal (around the walls)."""
        return len(shortest_path(self.walls, self.position, self.goal))

    def _invalid(self, why: str) -> StepResult:
        state = self.state_text()
        message = f"Invalid action: {why}. Write one of {', '.join(MOVES)} in <action>. {state}"
        return StepResult(
            Observation(content=message, name="error", anchor=state),
            -self.format_penalty,
            info={"invalid_action": 1},
        )

    def expert_turn(self) -> str:
        """The first move of a BFS shortest path from the current cell."""
        assert self.task is not None, "expert_turn() before reset()"
        path = shortest_path(self.walls, self.position, self.goal)
        return f"<action>{path[0]}</action>" if path else "<answer>done</answer>"

"""Sokoban, as RAGEN plays it (StarPO's main env): the tasks and the env. The puzzle itself (the
position model, gym-sokoban's rewards, XSB files, the A* solver and the level generator) is in
envs/games/sokoban_levels.py.

The agent pushes every box onto a target: `<action>Up || Left</action>` (Up, Down, Left, Right,
or RAGEN's numbers 1-4; several per turn, see envs/discrete.py). Rewards are gym-sokoban's, which RAGEN uses: -0.1 per
executed action, +1 when a push puts a box on a target, -1 when it takes one off, +10 when every
box is on a target (the episode then terminates, success 1). A move into a wall or a blocked box
is a legal no-op that still costs its -0.1. After `max_steps` actions (RAGEN's
`max_actions_per_traj`, 10) the episode is truncated.

The observation is RAGEN's text grid: `#` wall, `_` floor, `O` target, `X` box, `√` box on
target, `P` player, `S` player on target, rows joined by newlines. Each observation's `anchor`
is that grid, the full state, which GiGPO groups steps on.

Levels:
- generated (`make_sokoban_tasks`): levels solvable by construction (`generate_level`: a
  carved room, then reverse play from the solved state). The A* solver (`solve`) then finds an
  optimal solution, which must be between `min_solution` and `max_solution` moves (so a level
  fits the step budget), and becomes the task's gold answer; train and eval levels are disjoint
  by a hash, as in gridworld.
- or loaded from your own file in the standard XSB text format (`level_file`; the format is
  described in envs/games/sokoban_levels.py), each checked by the solver.

The scripted expert (`expert_turn`) replays the solver's optimal plan from the current state.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Literal

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.envs.games.sokoban_levels import (
    ACTIONS,
    MAX_SOLVER_NODES,
    Level,
    LevelError,
    generate_level,
    parse_xsb,
    read_xsb_levels,
    solve,
    step_level,
)
from agentic_rl.envs.splits import split_of
from agentic_rl.types import Task

Split = Literal["train", "eval"]


SYSTEM_PROMPT = (
    "You are solving the Sokoban puzzle. You are the player and you need to push all boxes to "
    "targets. When you are right next to a box, you can push it by moving in the same "
    "direction. You cannot push a box through a wall, and you cannot pull a box.\n"
    "Symbols: # wall, _ floor, O target, X box, √ box on target, P player, S player on target.\n"
    "Each turn, write up to {k} moves (Up, Down, Left, Right) separated by ||, like "
    "<action>Right || Right || Up</action>."
)


def level_task(level: Level, task_id: str, solution: list[int]) -> Task:
    """A task for `level` whose gold answer is `solution` (action names, space-separated)."""
    return Task(
        task_id=task_id,
        prompt=level.render(),
        answers=[" ".join(ACTIONS[i] for i in solution)],
        fields={"level": level.to_xsb(), "solution_length": len(solution)},
    )


def _file_task(level: Level, path: str, i: int, split: Split, max_steps: int) -> Task:
    """The task of level `i` (0-based) of the file `path`, solved once; a level without a
    solution, or whose shortest plan does not fit `max_steps` moves, is a LevelError."""
    solution = solve(level)
    if solution is None:
        raise LevelError(
            f"{path}: level {i + 1} has no solution the solver finds within {MAX_SOLVER_NODES} "
            "states: fix the level or remove it from the file"
        )
    if len(solution) > max_steps:
        raise LevelError(
            f"{path}: level {i + 1}'s shortest plan takes {len(solution)} moves, more than the "
            f"episode's step limit max_steps={max_steps}: set env.options.max_steps="
            f"{len(solution)} or more (and rollout.max_turns to fit it), or remove the level"
        )
    return level_task(level, f"sokoban-file-{split}-{i}", solution)


def make_sokoban_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    dim: int = 6,
    num_boxes: int = 1,
    min_solution: int = 2,
    max_solution: int = 10,
    level_file: str = "",
    eval_level_file: str = "",
    max_steps: int = 10,
) -> list[Task]:
    """`n` Sokoban levels for `split`.

    Generated (default): `dim` x `dim` rooms with `num_boxes` boxes (RAGEN: 6x6 with 1 box;
    8x8 with 2 is its harder variant) whose optimal solution takes `min_solution` to
    `max_solution` moves; train and eval levels are disjoint. From files: the levels of
    `level_file` (train) or `eval_level_file` (eval; defaults to `level_file`), at most `n`, in
    file order, each solved once (its optimal solution is the gold answer).

    `max_steps` is the env's step limit (the same `env.options.max_steps`): a level whose
    shortest plan is longer could never be solved in an episode (the expert would be cut off),
    so such a file level is a LevelError naming it, and `max_solution` above it a ValueError."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    key = "eval_level_file" if split == "eval" and eval_level_file else "level_file"
    path = (eval_level_file or level_file) if split == "eval" else level_file
    if path:
        try:
            levels = read_xsb_levels(path)[:n]
        except LevelError as err:
            raise LevelError(f"env.options.{key}: {err}") from None
        return [_file_task(level, path, i, split, max_steps) for i, level in enumerate(levels)]
    if min_solution > max_solution:
        raise ValueError(f"min_solution {min_solution} > max_solution {max_solution}")
    if max_solution > max_steps:
        raise ValueError(
            f"max_solution={max_solution} allows levels whose shortest plan is longer than "
            f"max_steps={max_steps}, the episode's step limit: lower max_solution or raise "
            "max_steps"
        )
    rng = random.Random(f"sokoban/{split}/{seed}/{dim}/{num_boxes}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(100 * n + 1000):
        if len(tasks) == n:
            return tasks
        level = generate_level(rng, dim, num_boxes)
        if level is None:
            continue
        key = level.to_xsb()
        if key in seen or split_of(key) != split:
            continue
        solution = solve(level)
        if solution is None or not min_solution <= len(solution) <= max_solution:
            continue
        seen.add(key)
        tasks.append(level_task(level, f"sokoban-{split}-{seed}-{len(tasks)}", solution))
    raise RuntimeError(
        f"could not generate {n} distinct {split} Sokoban levels ({dim}x{dim}, {num_boxes} "
        f"boxes, solutions of {min_solution}-{max_solution} moves)"
    )


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------


class SokobanEnv(DiscreteActionEnv):
    """Push every box onto a target (RAGEN's rewards and text grid; see the module doc)."""

    # The level in XSB text: a task-file row needs it (envs/base.py).
    task_fields = ("level",)

    index_base = 1  # RAGEN numbers the moves 1 Up, 2 Down, 3 Left, 4 Right

    def __init__(
        self,
        max_actions_per_turn: int = 5,
        max_steps: int = 10,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # moves are not tool calls; accepted for a uniform constructor
        super().__init__(ACTIONS, max_actions_per_turn, max_steps, format_penalty)
        self.level: Level | None = None
        self._plan: list[int] = []
        self._plan_from: Level | None = None

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(k=self.max_actions_per_turn)

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the level fixes everything
        self.level = parse_xsb(task.fields["level"])
        self._plan, self._plan_from = [], None

    def _apply(self, index: int) -> tuple[float, bool, bool]:
        assert self.level is not None
        self.level, reward = step_level(self.level, index)
        return reward, self.level.solved, False

    def _success(self) -> bool:
        return self.level is not None and self.level.solved

    def state_text(self) -> str:
        assert self.level is not None, "reset() first"
        return self.level.render()

    def expert_turn(self) -> str:
        """The next moves of an optimal solution from the current position (A*, cached along
        the plan; re-planned whenever the position is not where the plan leads)."""
        assert self.level is not None, "expert_turn() before reset()"
        if self.done:
            return self.expert_text([])
        if self._plan_from != self.level or not self._plan:
            plan = solve(self.level)
            if plan is None:
                raise RuntimeError("the expert found no solution from this position")
            self._plan = plan
        chosen, level = self._plan[: self.expert_budget()], self.level
        for move in chosen:
            level, _ = step_level(level, move)
        self._plan, self._plan_from = self._plan[len(chosen) :], level
        return self.expert_text(chosen)


def describe_solution(solution: Iterable[int]) -> str:
    """Action indices as the `<action>` body the expert writes ("Up || Left")."""
    return f" {ACTION_SEP} ".join(ACTIONS[i] for i in solution)

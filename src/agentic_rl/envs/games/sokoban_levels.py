"""The Sokoban puzzle itself, with no env around it: the position model, XSB level files, an
optimal solver and a generator of levels that are solvable by construction. envs/games/sokoban.py
builds RAGEN's env and tasks on top of it.

- The model: a `Level` (walls, goals, boxes, player) and `step_level`, one move with
  gym-sokoban's rewards (-0.1 per executed move, +1 when a push puts a box on a goal, -1 when it
  takes one off, +10 when every box is on a goal; a move into a wall or a blocked box is a no-op
  that still costs its -0.1). Moves are indices into ACTIONS (Up, Down, Left, Right).
  `Level.render` writes RAGEN's text grid: `#` wall, `_` floor, `O` target, `X` box, `√` box on
  target, `P` player, `S` player on target, rows joined by newlines.
- XSB levels (`parse_xsb`, `read_xsb_levels`, `Level.to_xsb`): the standard text format, `#`
  wall, `$` box, `.` goal, `@` player, `*` box on goal, `+` player on goal, ` `, `-` or `_`
  floor; levels separated by blank lines, `;` lines are comments. Malformed or already solved
  levels raise `LevelError`, naming what is wrong.
- The solver (`solve`): A* over (player, boxes) for a fewest-moves solution, with dead cells
  (`live_cells`) pruned.
- The generator (`generate_level`): a room carved by a random walk inside a `dim` x `dim` box of
  walls (`carve_room`); boxes start on their goals (a solved state) and the player plays in
  reverse, pulling boxes away (`reverse_play`); every state reached that way is solvable (each
  pull undone is a push).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.errors import UserInputError

Cell = tuple[int, int]

ACTIONS = ("Up", "Down", "Left", "Right")
DELTAS: tuple[Cell, ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))
STEP_REWARD, BOX_ON_REWARD, BOX_OFF_REWARD, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0
MAX_SOLVER_NODES = 200_000


RAGEN_SYMBOLS = {
    "wall": "#", "player": "P", "player_on_goal": "S", "box": "X", "box_on_goal": "√",
    "floor": "_", "goal": "O",
}  # fmt: skip
XSB_SYMBOLS = {
    "wall": "#", "player": "@", "player_on_goal": "+", "box": "$", "box_on_goal": "*",
    "floor": " ", "goal": ".",
}  # fmt: skip


class LevelError(UserInputError, ValueError):
    """A Sokoban level that cannot be used (malformed, unsolvable); the message says why."""


@dataclass(frozen=True)
class Level:
    """A Sokoban position: static walls and goals, the boxes and the player."""

    height: int
    width: int
    walls: frozenset[Cell]
    goals: frozenset[Cell]
    boxes: frozenset[Cell]
    player: Cell

    def is_free(self, cell: Cell, boxes: frozenset[Cell] | None = None) -> bool:
        """Inside the grid, not a wall and not a box."""
        boxes = self.boxes if boxes is None else boxes
        r, c = cell
        inside = 0 <= r < self.height and 0 <= c < self.width
        return inside and cell not in self.walls and cell not in boxes

    @property
    def solved(self) -> bool:
        return self.boxes <= self.goals

    def moved(self, boxes: frozenset[Cell], player: Cell) -> Level:
        return Level(self.height, self.width, self.walls, self.goals, boxes, player)

    def render(self) -> str:
        """RAGEN's text grid (see the module docstring)."""
        return self._grid(RAGEN_SYMBOLS)

    def to_xsb(self) -> str:
        """The level in XSB text (what `parse_xsb` reads back)."""
        return self._grid(XSB_SYMBOLS)

    def _grid(self, symbols: dict[str, str]) -> str:
        """Rows of one character a cell, `symbols` naming each kind of cell."""
        rows = []
        for r in range(self.height):
            row = []
            for c in range(self.width):
                cell = (r, c)
                on_goal = "_on_goal" if cell in self.goals else ""
                if cell in self.walls:
                    row.append(symbols["wall"])
                elif cell == self.player:
                    row.append(symbols["player" + on_goal])
                elif cell in self.boxes:
                    row.append(symbols["box" + on_goal])
                else:
                    row.append(symbols["goal" if on_goal else "floor"])
            rows.append("".join(row))
        return "\n".join(rows)


def step_level(level: Level, action: int) -> tuple[Level, float]:
    """Apply one move (an index into ACTIONS); returns the new level and gym-sokoban's reward."""
    dr, dc = DELTAS[action]
    r, c = level.player
    target = (r + dr, c + dc)
    reward = STEP_REWARD
    if target in level.boxes:
        beyond = (r + 2 * dr, c + 2 * dc)
        if not level.is_free(beyond):
            return level, reward  # blocked push: a no-op
        boxes = (level.boxes - {target}) | {beyond}
        before, after = target in level.goals, beyond in level.goals
        reward += BOX_ON_REWARD if after and not before else 0.0
        reward += BOX_OFF_REWARD if before and not after else 0.0
        level = level.moved(frozenset(boxes), target)
        if level.solved:
            reward += SOLVED_REWARD
        return level, reward
    if level.is_free(target):
        return level.moved(level.boxes, target), reward
    return level, reward  # into a wall


# ---------------------------------------------------------------------------------------------
# XSB levels
# ---------------------------------------------------------------------------------------------

_XSB = {"#", "@", "+", "$", "*", ".", " ", "-", "_"}


def parse_xsb(text: str) -> Level:
    """One level in XSB text. Raises LevelError naming what is wrong."""
    lines = [line.rstrip("\r\n") for line in text.split("\n")]
    lines = [line for line in lines if line.strip() and not line.lstrip().startswith(";")]
    if not lines:
        raise LevelError("empty level")
    walls, goals, boxes, players = set(), set(), set(), []
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            if ch not in _XSB:
                raise LevelError(f"unknown character {ch!r} at row {r + 1}, column {c + 1}")
            if ch == "#":
                walls.add((r, c))
            if ch in ".*+":
                goals.add((r, c))
            if ch in "$*":
                boxes.add((r, c))
            if ch in "@+":
                players.append((r, c))
    if len(players) != 1:
        raise LevelError(f"a level needs exactly one player (@ or +), found {len(players)}")
    if not boxes:
        raise LevelError("a level needs at least one box ($ or *)")
    if len(boxes) != len(goals):
        raise LevelError(f"{len(boxes)} boxes but {len(goals)} goals: they must match")
    level = Level(
        height=len(lines),
        width=max(len(line) for line in lines),
        walls=frozenset(walls),
        goals=frozenset(goals),
        boxes=frozenset(boxes),
        player=players[0],
    )
    if level.solved:
        raise LevelError("the level is already solved (every box is on a goal)")
    return level


def read_xsb_levels(path: str | Path) -> list[Level]:
    """Every level of an XSB file (levels separated by blank lines; `;` lines are comments);
    a file that cannot be read is a LevelError naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LevelError(f"{path}: no such level file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise LevelError(f"{path}: cannot be read as an XSB text file ({err})") from None
    blocks, current = [], []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(";"):
            current.append(line)
        elif current:
            blocks.append("\n".join(current))
            current = []
    if current:
        blocks.append("\n".join(current))
    if not blocks:
        raise LevelError(f"{path}: no levels found")
    levels = []
    for i, block in enumerate(blocks):
        try:
            levels.append(parse_xsb(block))
        except LevelError as err:
            raise LevelError(f"{path}: level {i + 1}: {err}") from None
    return levels


# ---------------------------------------------------------------------------------------------
# Solver
# ---------------------------------------------------------------------------------------------


def live_cells(level: Level) -> frozenset[Cell]:
    """Cells from which a lone box can still be pushed onto some goal (the others are dead:
    a box pushed there can never be solved). Found by pulling a box backwards from every goal."""
    live = set(level.goals)
    queue = deque(level.goals)
    empty: frozenset[Cell] = frozenset()
    while queue:
        r, c = queue.popleft()
        for dr, dc in DELTAS:
            before, player = (r - dr, c - dc), (r - 2 * dr, c - 2 * dc)
            if before in live:
                continue
            if level.is_free(before, empty) and level.is_free(player, empty):
                live.add(before)
                queue.append(before)
    return frozenset(live)


def solve(level: Level, max_nodes: int = MAX_SOLVER_NODES) -> list[int] | None:
    """An optimal (fewest moves) solution as action indices, by A* over (player, boxes) with
    the sum of each box's distance to its nearest goal as the (admissible) heuristic and dead
    cells pruned. [] if already solved; None if unsolvable or `max_nodes` states were expanded
    without a solution. Deterministic."""
    if level.solved:
        return []
    live = live_cells(level)
    goals = tuple(level.goals)

    def h(boxes: frozenset[Cell]) -> int:
        return sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in goals) for b in boxes)

    start = (level.player, level.boxes)
    counter = itertools.count()
    frontier = [(h(level.boxes), next(counter), 0, start)]
    parent: dict[tuple[Cell, frozenset[Cell]], tuple[tuple[Cell, frozenset[Cell]], int] | None]
    parent = {start: None}
    best = {start: 0}
    expanded = 0
    while frontier:
        _, _, g, state = heapq.heappop(frontier)
        if g > best[state]:
            continue
        player, boxes = state
        if boxes <= level.goals:
            moves = []
            while parent[state] is not None:
                state, move = parent[state]  # type: ignore[misc]
                moves.append(move)
            return moves[::-1]
        expanded += 1
        if expanded > max_nodes:
            return None
        for move, (dr, dc) in enumerate(DELTAS):
            target = (player[0] + dr, player[1] + dc)
            if target in boxes:
                beyond = (target[0] + dr, target[1] + dc)
                if beyond not in live or not level.is_free(beyond, boxes):
                    continue
                new_boxes = (boxes - {target}) | {beyond}
            elif level.is_free(target, boxes):
                new_boxes = boxes
            else:
                continue
            nxt = (target, frozenset(new_boxes))
            if g + 1 < best.get(nxt, 1 << 30):
                best[nxt] = g + 1
                parent[nxt] = (state, move)
                heapq.heappush(frontier, (g + 1 + h(nxt[1]), next(counter), g + 1, nxt))
    return None


# ---------------------------------------------------------------------------------------------
# Level generation: a carved room, then reverse play from the solved state
# ---------------------------------------------------------------------------------------------


def carve_room(rng: random.Random, dim: int, floor_cells: int) -> set[Cell]:
    """Floor cells of a `dim` x `dim` room (border always wall), carved by a random walk that
    keeps its direction with probability 0.65 and sometimes widens the corridor."""
    inner = dim - 2
    target = min(floor_cells, inner * inner)
    cell = (rng.randrange(1, dim - 1), rng.randrange(1, dim - 1))
    floor = {cell}
    direction = rng.choice(DELTAS)
    for _ in range(50 * dim * dim):
        if len(floor) >= target:
            break
        if rng.random() < 0.35:
            direction = rng.choice(DELTAS)
        r, c = cell[0] + direction[0], cell[1] + direction[1]
        if not (1 <= r <= dim - 2 and 1 <= c <= dim - 2):
            direction = rng.choice(DELTAS)
            continue
        cell = (r, c)
        floor.add(cell)
        if rng.random() < 0.2:  # widen: also carve a side cell
            side = (r + direction[1], c + direction[0])
            if 1 <= side[0] <= dim - 2 and 1 <= side[1] <= dim - 2:
                floor.add(side)
    return floor


def reverse_play(rng: random.Random, level: Level, steps: int) -> Level:
    """Play `steps` random reverse moves from `level`: the player walks, and when it walks away
    from an adjacent box it may pull it along (probability 0.6). Every position reached is
    solvable: undoing each pull is a legal push, so the solved start is reachable from it.
    Returns the unsolved position whose boxes are farthest from their goals (ties: the latest).
    """
    best, best_score = level, -1
    player, boxes = level.player, level.boxes
    for _ in range(steps):
        dr, dc = rng.choice(DELTAS)
        target = (player[0] + dr, player[1] + dc)
        if not level.is_free(target, boxes):
            continue
        behind = (player[0] - dr, player[1] - dc)
        if behind in boxes and rng.random() < 0.6:
            boxes = frozenset((boxes - {behind}) | {player})
        player = target
        score = sum(min(abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in level.goals) for b in boxes)
        if score >= best_score and not boxes <= level.goals:
            best, best_score = level.moved(boxes, player), score
    return best


def generate_level(
    rng: random.Random, dim: int = 6, num_boxes: int = 1, reverse_steps: int = 0
) -> Level | None:
    """One random level that is solvable by construction, or None when this draw failed (the
    room had no room for the boxes or reverse play never moved a box)."""
    if dim < 4:
        raise ValueError(f"dim must be >= 4, got {dim}")
    inner = (dim - 2) ** 2
    floor = carve_room(rng, dim, floor_cells=max(num_boxes + 4, int(0.6 * inner)))
    if len(floor) < 2 * num_boxes + 2:
        return None
    cells = sorted(floor)
    goals = rng.sample(cells, num_boxes)
    free = [cell for cell in cells if cell not in goals]
    player = rng.choice(free)
    walls = {(r, c) for r in range(dim) for c in range(dim)} - floor
    solved = Level(dim, dim, frozenset(walls), frozenset(goals), frozenset(goals), player)
    level = reverse_play(rng, solved, reverse_steps or int(1.7 * 2 * dim) * 4)
    return None if level.solved else level

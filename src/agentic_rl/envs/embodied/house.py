"""The house that VLN-R1 navigation (envs/embodied/navigation.py) plays in, with no env: the map,
the agent's pose and moves, shortest paths, R2R-style route instructions and a seeded generator
of houses. envs/embodied/house_render.py draws a house; navigation.py builds tasks and the env.

A house (`generate_house`, a JSON-able spec; `HouseMap` reads it): a grid of rooms (kitchen,
bedroom, ...), each `room_size` x `room_size` cells, joined by doors along a random spanning
tree of the rooms (plus an occasional extra door); every room holds one landmark (the fridge,
the bed...). The agent's pose is a cell and a heading (north, east, south or west). Actions
(VLN-R1's, on a grid: one cell instead of 25 cm, 90 degrees instead of 30), indices into
ACTIONS: `forward` (blocked by walls: a no-op), `turn-left`, `turn-right`, `stop` (leaves the
pose as it is; ending the episode is the env's). `step_pose` applies one.

`shortest_path` is the fewest actions to a goal cell, then `stop` (breadth-first search over
cell and heading, ties broken forward < turn-left < turn-right); `route_instruction` describes
a path as R2R does ("Turn right and walk forward two steps into the kitchen, then ... stop at
the fridge."); `HouseMap.describe` and `HouseMap.in_view` say what lies next to and ahead of a
pose.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from typing import Any

Cell = tuple[int, int]
Pose = tuple[int, int, int]  # row, column, heading

ACTIONS = ("forward", "turn-left", "turn-right", "stop")
FORWARD, LEFT, RIGHT, STOP = range(4)
HEADINGS = ("north", "east", "south", "west")
DELTAS: tuple[Cell, ...] = ((-1, 0), (0, 1), (1, 0), (0, -1))
ROOMS: dict[str, tuple[str, ...]] = {
    "kitchen": ("fridge", "stove", "sink"),
    "bedroom": ("bed", "wardrobe", "nightstand"),
    "bathroom": ("bathtub", "mirror", "towel rack"),
    "living room": ("sofa", "television", "fireplace"),
    "office": ("desk", "bookshelf", "printer"),
    "hallway": ("coat rack", "umbrella stand", "shoe cabinet"),
    "dining room": ("dining table", "sideboard", "chandelier"),
    "laundry room": ("washing machine", "ironing board", "laundry basket"),
    "study": ("armchair", "globe", "piano"),
}
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class HouseMap:
    """The static house: rooms on a grid, doors between them, one landmark per room."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.room_size: int = spec["room_size"]
        self.rows: int = spec["room_rows"] * self.room_size
        self.cols: int = spec["room_cols"] * self.room_size
        self.room_names: dict[tuple[int, int], str] = {(r, c): name for r, c, name in spec["rooms"]}
        self.doors: set[frozenset[Cell]] = {
            frozenset({tuple(a), tuple(b)})  # type: ignore[arg-type]
            for a, b in spec["doors"]
        }
        self.landmarks: dict[Cell, str] = {(r, c): name for r, c, name in spec["landmarks"]}

    def room_of(self, cell: Cell) -> tuple[int, int]:
        return cell[0] // self.room_size, cell[1] // self.room_size

    def room_name(self, cell: Cell) -> str:
        return self.room_names[self.room_of(cell)]

    def inside(self, cell: Cell) -> bool:
        return 0 <= cell[0] < self.rows and 0 <= cell[1] < self.cols

    def passable(self, a: Cell, b: Cell) -> bool:
        """Whether one step leads from cell `a` to the adjacent cell `b` (same room, or a door)."""
        if not self.inside(b):
            return False
        return self.room_of(a) == self.room_of(b) or frozenset({a, b}) in self.doors

    def describe(self, cell: Cell, heading: int) -> str:
        """What the neighbour cell in direction `heading` is, as the observation says it."""
        dr, dc = DELTAS[heading]
        nxt = (cell[0] + dr, cell[1] + dc)
        if not self.passable(cell, nxt):
            return "a wall"
        if self.room_of(nxt) != self.room_of(cell):
            return f"a door to the {self.room_name(nxt)}"
        if nxt in self.landmarks:
            return f"the {self.landmarks[nxt]}"
        return "open floor"

    def in_view(self, cell: Cell, heading: int) -> str:
        """The first landmark straight ahead (through doors, up to a wall) and its distance."""
        dr, dc = DELTAS[heading]
        steps = 0
        while True:
            nxt = (cell[0] + dr, cell[1] + dc)
            if not self.passable(cell, nxt):
                return "nothing"
            cell, steps = nxt, steps + 1
            if cell in self.landmarks:
                unit = "step" if steps == 1 else "steps"
                return f"the {self.landmarks[cell]}, {number(steps)} {unit} ahead"


def number(n: int) -> str:
    return NUMBERS[n] if 0 <= n < len(NUMBERS) else str(n)


def step_pose(house: HouseMap, pose: Pose, action: int) -> Pose:
    """The pose after one action (`stop` and a blocked `forward` leave it unchanged)."""
    r, c, h = pose
    if action == LEFT:
        return r, c, (h - 1) % 4
    if action == RIGHT:
        return r, c, (h + 1) % 4
    if action == FORWARD:
        dr, dc = DELTAS[h]
        if house.passable((r, c), (r + dr, c + dc)):
            return r + dr, c + dc, h
    return pose


def shortest_path(house: HouseMap, pose: Pose, goal: Cell) -> list[int]:
    """The fewest actions from `pose` to standing on `goal`, then `stop` (breadth-first search
    over (cell, heading); ties broken forward < turn-left < turn-right, so deterministic)."""
    parent: dict[Pose, tuple[Pose, int] | None] = {pose: None}
    queue = deque([pose])
    while queue:
        current = queue.popleft()
        if current[:2] == goal:
            path = [STOP]
            while parent[current] is not None:
                current, action = parent[current]  # type: ignore[misc]
                path.append(action)
            return path[::-1]
        for action in (FORWARD, LEFT, RIGHT):
            nxt = step_pose(house, current, action)
            if nxt not in parent:
                parent[nxt] = (current, action)
                queue.append(nxt)
    raise ValueError(f"the goal {goal} cannot be reached from {pose}")


def route_instruction(house: HouseMap, pose: Pose, path: Sequence[int], goal: Cell) -> str:
    """An R2R-style description of `path` from `pose`: turns, forward runs (with the rooms they
    enter) and where to stop."""
    phrases: list[str] = []
    i = 0
    while i < len(path) and path[i] != STOP:
        action = path[i]
        if action in (LEFT, RIGHT):
            if i + 1 < len(path) and path[i + 1] == action:
                phrases.append("turn around")
                pose = step_pose(house, step_pose(house, pose, action), action)
                i += 2
            else:
                phrases.append("turn left" if action == LEFT else "turn right")
                pose = step_pose(house, pose, action)
                i += 1
            continue
        run, entered = 0, []
        while i < len(path) and path[i] == FORWARD:
            before = pose
            pose = step_pose(house, pose, FORWARD)
            if house.room_of(before[:2]) != house.room_of(pose[:2]):
                entered.append(house.room_name(pose[:2]))
            run, i = run + 1, i + 1
        phrase = f"walk forward {number(run)} step{'s' if run > 1 else ''}"
        if entered:
            phrase += " into the " + entered[-1]
        phrases.append(phrase)
    phrases.append(f"stop at the {house.landmarks[goal]}")
    text = ", then ".join(phrases)
    return text[0].upper() + text[1:] + "."


# ---------------------------------------------------------------------------------------------
# House generation
# ---------------------------------------------------------------------------------------------


def generate_house(
    rng: random.Random, room_rows: int = 2, room_cols: int = 2, room_size: int = 2
) -> dict[str, Any]:
    """A random house as a JSON-able spec (rooms, doors, landmarks); see the module doc."""
    if room_rows * room_cols > len(ROOMS):
        raise ValueError(f"at most {len(ROOMS)} rooms, got {room_rows} x {room_cols}")
    if room_size < 1:
        raise ValueError(f"room_size must be >= 1, got {room_size}")
    grid = [(r, c) for r in range(room_rows) for c in range(room_cols)]
    names = rng.sample(sorted(ROOMS), len(grid))
    # a random spanning tree over the rooms (randomised DFS), plus a few extra doors
    neighbours = {
        room: [
            (room[0] + dr, room[1] + dc)
            for dr, dc in DELTAS
            if 0 <= room[0] + dr < room_rows and 0 <= room[1] + dc < room_cols
        ]
        for room in grid
    }
    start = rng.choice(grid)
    seen, stack, links = {start}, [start], []
    while stack:
        room = stack[-1]
        options = [n for n in neighbours[room] if n not in seen]
        if not options:
            stack.pop()
            continue
        nxt = rng.choice(options)
        links.append((room, nxt))
        seen.add(nxt)
        stack.append(nxt)
    for room in grid:
        for other in neighbours[room]:
            linked = (room, other) in links or (other, room) in links
            if room < other and not linked and rng.random() < 0.25:
                links.append((room, other))
    doors = []
    for a, b in links:
        k = rng.randrange(room_size)
        if a[0] == b[0]:  # side by side: a door in the shared vertical wall
            left, right = (a, b) if a[1] < b[1] else (b, a)
            row = left[0] * room_size + k
            doors.append([[row, left[1] * room_size + room_size - 1], [row, right[1] * room_size]])
        else:  # one above the other
            top, bottom = (a, b) if a[0] < b[0] else (b, a)
            col = top[1] * room_size + k
            doors.append([[top[0] * room_size + room_size - 1, col], [bottom[0] * room_size, col]])
    landmarks = []
    for (r, c), name in zip(grid, names, strict=True):
        cell = (r * room_size + rng.randrange(room_size), c * room_size + rng.randrange(room_size))
        landmarks.append([cell[0], cell[1], rng.choice(ROOMS[name])])
    return {
        "room_rows": room_rows,
        "room_cols": room_cols,
        "room_size": room_size,
        "rooms": [[r, c, name] for (r, c), name in zip(grid, names, strict=True)],
        "doors": doors,
        "landmarks": landmarks,
    }

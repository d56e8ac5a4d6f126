"""Envs whose observations are images: rendered scene questions and the grid world as a picture.

- `VisualQAEnv` (`visual_qa`): the alignment data of a grafted vision tower (model/vision.py),
  LLaVA's stage 1 made synthetic: a 5 x 5 grid of cells, some holding a coloured shape or a
  black digit, and one question about it: which colour / which shape / which number is in a
  cell, where a shape is, how many shapes there are. One turn, `<answer>...</answer>`, reward 1
  for the exact answer. The image is all the agent gets: the question names no colours or
  positions that would give the answer away.
- `VisualGridEnv` (`visual_grid`): `envs/games/gridworld.py`'s grid world, but each observation is a
  picture of the grid (walls black, the agent a blue circle, the goal a green square) and a
  text that says nothing about where anything is, so choosing a move means reading the image
  (Visual Planning's "actions chosen from rendered image states").

Images are rendered with PIL, stored by content hash (model/images.py `save_image`) under
`image_dir` (default: the model cache's `images/`) and travel as `ImageRef`s; each 80 x 80 image
has one 16 x 16 cell per vision patch of the grafted tower.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from agentic_rl.envs.base import check_steppable
from agentic_rl.envs.games.gridworld import MOVE_TOOL, SIZE, GridWorldEnv, make_gridworld_tasks
from agentic_rl.envs.splits import split_of
from agentic_rl.model.images import save_image
from agentic_rl.model.load import cache_root
from agentic_rl.types import Action, ImageRef, Observation, StepResult, Task

Split = Literal["train", "eval"]
Cell = tuple[int, int]

CELL = 16  # pixels per cell: one vision patch of the grafted tower
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (235, 200, 0),
    "purple": (140, 40, 180),
    "orange": (245, 130, 0),
}
SHAPES = ("circle", "square", "triangle")
QUESTION_KINDS = ("colour", "shape", "number", "where", "count")
CAPTION_KIND = "describe"
"""The dense caption (LLaVA's stage-1 task made synthetic): every object of the scene in reading
order, e.g. `1,2 red circle; 3,4 digit 7`. Not among the default kinds: the alignment stage asks
for it by name (train/vision_align.py), so each example supervises every cell of the picture."""
CAPTION_QUESTION = "Describe the grid: each object's row,column and what it is, in reading order."


def default_image_dir() -> Path:
    return cache_root() / "images"


def _draw_shape(draw: Any, cell: Cell, shape: str, colour: tuple[int, int, int]) -> None:
    top, left = cell[0] * CELL, cell[1] * CELL
    box = (left + 2, top + 2, left + CELL - 3, top + CELL - 3)
    if shape == "circle":
        draw.ellipse(box, fill=colour)
    elif shape == "square":
        draw.rectangle(box, fill=colour)
    elif shape == "triangle":
        draw.polygon([(left + CELL // 2, top + 2), (box[0], box[3]), (box[2], box[3])], fill=colour)
    else:
        raise ValueError(f"unknown shape {shape!r}")


@lru_cache(maxsize=1)
def _font() -> Any:
    from PIL import ImageFont

    return ImageFont.load_default(size=13)


def render_scene(objects: dict[Cell, tuple[str, str]], size: int = SIZE) -> Any:
    """A size x size grid (CELL pixels a cell, light grid lines) with `objects`: cell ->
    (kind, value), kind a shape name with value a colour name, or "digit" with value "0".."9"
    drawn in black. Returns a PIL RGB image."""
    from PIL import Image, ImageDraw

    side = size * CELL
    image = Image.new("RGB", (side, side), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for k in range(1, size):
        draw.line([(k * CELL, 0), (k * CELL, side)], fill=(215, 215, 215))
        draw.line([(0, k * CELL), (side, k * CELL)], fill=(215, 215, 215))
    for cell, (kind, value) in sorted(objects.items()):
        if kind == "digit":
            x, y = cell[1] * CELL + CELL // 2, cell[0] * CELL + CELL // 2
            draw.text((x, y), value, fill=(0, 0, 0), font=_font(), anchor="mm")
        elif kind == "wall":
            top, left = cell[0] * CELL, cell[1] * CELL
            draw.rectangle((left, top, left + CELL - 1, top + CELL - 1), fill=(0, 0, 0))
        else:
            _draw_shape(draw, cell, kind, COLOURS[value])
    return image


def describe_scene(objects: dict[Cell, tuple[str, str]]) -> str:
    """Every object of the scene in reading order (row by row, left to right), rows and columns
    counted from 1: `1,2 red circle; 3,4 digit 7; 5,1 wall`."""
    parts = []
    for (row, col), (kind, value) in sorted(objects.items()):
        what = (
            f"digit {value}" if kind == "digit" else "wall" if kind == "wall" else f"{value} {kind}"
        )
        parts.append(f"{row + 1},{col + 1} {what}")
    return "; ".join(parts)


def _place(cell: Cell) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"


def scene_split(objects: dict[Cell, tuple[str, str]]) -> Split:
    """The split a scene belongs to (a hash of its objects): other stages that render scenes
    (train/vision_pretrain.py) train only on scenes of the train split, so the held-out scenes
    stay unseen."""
    return split_of(repr(sorted(objects.items())))


def _scene(rng: random.Random) -> dict[Cell, tuple[str, str]]:
    cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
    chosen = rng.sample(cells, rng.randint(2, 5))
    objects: dict[Cell, tuple[str, str]] = {}
    for i, cell in enumerate(chosen):
        if i == 0 or rng.random() < 0.7:
            objects[cell] = (rng.choice(SHAPES), rng.choice(list(COLOURS)))
        else:
            objects[cell] = ("digit", str(rng.randint(0, 9)))
    return objects


def _question(
    objects: dict[Cell, tuple[str, str]], kind: str, rng: random.Random
) -> tuple[str, str] | None:
    """(question, answer) of `kind` about the scene, or None if the scene cannot ask it
    unambiguously (e.g. no digit, or two shapes alike)."""
    shapes = {cell: obj for cell, obj in objects.items() if obj[0] != "digit"}
    digits = {cell: obj for cell, obj in objects.items() if obj[0] == "digit"}
    if kind == "colour":
        cell = rng.choice(sorted(shapes))
        return f"What colour is the shape in {_place(cell)}?", shapes[cell][1]
    if kind == "shape":
        cell = rng.choice(sorted(shapes))
        return f"What shape is in {_place(cell)}?", shapes[cell][0]
    if kind == "number":
        if not digits:
            return None
        cell = rng.choice(sorted(digits))
        return f"What number is in {_place(cell)}?", digits[cell][1]
    if kind == "where":
        cell = rng.choice(sorted(shapes))
        shape, colour = shapes[cell]
        if sum(1 for obj in shapes.values() if obj == (shape, colour)) > 1:
            return None
        # The question names the object (that is what it asks about); the answer is its place.
        return f"In which row and column is the {colour} {shape}?", f"{cell[0] + 1},{cell[1] + 1}"
    if kind == "count":
        return "How many coloured shapes are there?", str(len(shapes))
    if kind == CAPTION_KIND:
        return CAPTION_QUESTION, describe_scene(objects)
    raise ValueError(f"unknown question kind {kind!r}")


def checked_question_kinds(
    kinds: Sequence[str] | None, default: Sequence[str], valid: Sequence[str]
) -> list[str]:
    """The question kinds a task maker takes in turn: `kinds`, or `default` when none are
    named; a kind not in `valid` raises ValueError that lists the valid ones.

    Why: the kinds come from a recipe or the command line, and a misspelt one must fail when
    the tasks are made, naming the way out, not leave a split without its questions.
    """
    chosen = list(kinds or default)
    unknown = sorted(set(chosen) - set(valid))
    if unknown:
        raise ValueError(f"unknown question kinds {unknown} (valid: {', '.join(valid)})")
    return chosen


def make_visual_qa_tasks(
    split: Split, n: int, seed: int = 0, *, kinds: list[str] | None = None
) -> list[Task]:
    """`n` scene questions for `split` (train and eval scenes are disjoint by a hash of the
    scene). `kinds`: the question kinds to draw from (default all of QUESTION_KINDS; CAPTION_KIND
    only when named), taken in turn. Each task: `fields = {"objects": [[row, col, kind, value]], "kind"}`."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    kinds = checked_question_kinds(kinds, QUESTION_KINDS, (*QUESTION_KINDS, CAPTION_KIND))
    rng = random.Random(f"visual_qa/{split}/{seed}")
    tasks: list[Task] = []
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        objects = _scene(rng)
        if scene_split(objects) != split:
            continue
        kind = kinds[len(tasks) % len(kinds)]
        asked = _question(objects, kind, rng)
        if asked is None:
            continue
        question, answer = asked
        tasks.append(
            Task(
                task_id=f"vqa-{split}-{seed}-{len(tasks)}",
                prompt=question,
                answers=[answer],
                fields={
                    "objects": [
                        [r, c, kind_, value] for (r, c), (kind_, value) in sorted(objects.items())
                    ],
                    "kind": kind,
                },
            )
        )
    raise RuntimeError(f"could not generate {n} {split} visual questions")


def scene_of(task: Task) -> dict[Cell, tuple[str, str]]:
    return {(int(r), int(c)): (str(k), str(v)) for r, c, k, v in task.fields["objects"]}


VQA_SYSTEM = "Answer about the 5x5 grid image with <answer>one word</answer>."
"""Short on purpose: the alignment stage's cost is its sequence length (rows and columns count
from 1 at the top left, as the questions say)."""


class VisualQAEnv:
    """One question about one rendered scene; reward 1 for the exact answer (case and spaces
    ignored), 0 otherwise; a malformed turn costs -format_penalty and shows an error (the
    rollout's turn budget ends the episode), stopping without an answer ends it with that
    penalty."""

    # The scene the picture is drawn from: a task-file row needs it (envs/base.py).
    task_fields = ("objects",)

    system_prompt = VQA_SYSTEM
    usage_hint = "Answer with <answer>...</answer>."
    """The way out that the error observation of a malformed turn names."""

    def __init__(
        self, format_penalty: float = 0.1, tool_timeout_s: float = 10.0, image_dir: str = ""
    ) -> None:
        del tool_timeout_s  # no tools; accepted for a uniform constructor
        self.tools: list[Any] = []
        self.format_penalty = format_penalty
        self.image_dir = Path(image_dir) if image_dir else default_image_dir()
        self.task: Task | None = None
        self.done = False

    def image(self, task: Task) -> ImageRef:
        return save_image(render_scene(scene_of(task)), self.image_dir)

    def reset(self, task: Task, seed: int) -> Observation:
        del seed  # the task fixes the scene
        self.task, self.done = task, False
        return Observation(
            messages=[
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": task.prompt},
            ],
            images=[self.image(task)],
        )

    def step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "answer":
            self.done = True
            reward, info = self.judge(action)
            return StepResult(None, reward, terminated=True, info=info)
        if action.kind == "none":  # stopped without answering: a wrong answer
            self.done = True
            return StepResult(
                None, -self.format_penalty, terminated=True, info={"no_action": 1, "success": 0.0}
            )
        why = action.error or f"a {action.kind} action"
        message = f"Invalid action: {why}. {self.usage_hint}"
        return StepResult(
            Observation(content=message, name="error"),
            -self.format_penalty,
            info={"invalid_action": 1},
        )

    def judge(self, action: Action) -> tuple[float, dict[str, Any]]:
        """(reward, info) of the answer that ends the episode: 1 for the exact answer."""
        assert self.task is not None
        right = float(answer_matches(action.text, self.task.answers))
        return right, {"answered": 1, "success": right}

    def expert_turn(self) -> str:
        assert self.task is not None, "expert_turn() before reset()"
        return f"<answer>{self.task.answers[0]}</answer>"


def answer_matches(text: str, answers: Sequence[str]) -> bool:
    """Whether `text` is one of `answers` with case and white space ignored.

    Why: the answers about a picture are short ("3,4", "red", "12"); "3, 4" or "Red" read it
    just as right, so the reward judges what was read, not its spelling.
    """

    def norm(value: str) -> str:
        return "".join(value.lower().split())

    return norm(text) in {norm(answer) for answer in answers}


# ---------------------------------------------------------------------------------------------
# The grid world as a picture
# ---------------------------------------------------------------------------------------------

GRID_SYSTEM = (
    "You are in a grid world shown as an image: you are the blue circle, the goal is the "
    "green square, black cells are walls. Each turn, write exactly one move: "
    "<action>up</action>, <action>down</action>, <action>left</action> or <action>right</action>."
)


def render_grid(walls: set[Cell], position: Cell, goal: Cell) -> Any:
    objects: dict[Cell, tuple[str, str]] = {cell: ("wall", "") for cell in walls}
    objects[goal] = ("square", "green")
    objects[position] = ("circle", "blue")
    return render_scene(objects)


def make_visual_grid_tasks(split: Split, n: int, seed: int = 0) -> list[Task]:
    """The grid world's layouts (envs/games/gridworld.py); the prompt names no positions."""
    tasks = make_gridworld_tasks(split, n, seed)
    for task in tasks:
        task.prompt = "Here is the grid. Walk to the goal."
    return tasks


class VisualGridEnv(GridWorldEnv):
    """`GridWorldEnv` whose observations are images of the grid. Rewards, moves, the expert and
    the anchors (the state text, not shown) are the grid world's."""

    def __init__(
        self, format_penalty: float = 0.1, tool_timeout_s: float = 10.0, image_dir: str = ""
    ) -> None:
        super().__init__(format_penalty, tool_timeout_s)
        self.image_dir = Path(image_dir) if image_dir else default_image_dir()

    def picture(self) -> ImageRef:
        return save_image(render_grid(self.walls, self.position, self.goal), self.image_dir)

    def reset(self, task: Task, seed: int) -> Observation:
        first = super().reset(task, seed)
        first.messages = [
            {"role": "system", "content": GRID_SYSTEM},
            {"role": "user", "content": "Here is the grid. Walk to the goal."},
        ]
        first.images = [self.picture()]
        return first

    def step(self, action: Action) -> StepResult:
        result = super().step(action)
        if result.observation is not None:  # the state as a picture instead of its description
            moved = result.observation.name == MOVE_TOOL.name
            result.observation.content = (
                "Moved." if moved else _without_state(result.observation.content, self.state_text())
            )
            result.observation.images = [self.picture()]
        return result


def _without_state(message: str, state: str) -> str:
    """An invalid-move message without the state text (the picture shows the state)."""
    return message.replace(f" {state}", "").strip()

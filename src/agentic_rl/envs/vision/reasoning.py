"""Scene questions that need a chain of thought, with a modality-bridging expert, `visual_reasoning`.

The env of the Vision-R1 recipe (Huang et al. 2025, "Vision-R1: Incentivizing Reasoning
Capability in Multimodal Large Language Models"). Each task is a rendered 5 x 5 scene
(envs/vision/scenes.py's shapes and digits, 3-7 objects) and a question that takes a few steps:

- `sum`: "What is the sum of the numbers in the grid?" (two or more digits);
- `count_colour`: "How many COLOUR shapes are there?";
- `count_shape`: "How many SHAPEs are there?".

One turn: `<think>reasoning</think><answer>a</answer>`. Reward (Vision-R1's): 1 only if the
format and the answer are both right (a `<think>...</think>` block before `<answer>`, the exact
answer), else 0; a malformed turn (no answer tag) costs -format_penalty and shows an error.

Modality bridging, the scripted expert (`expert_turn`): Vision-R1 turns each training image into
a detailed text description (a VLM with a "pseudo-CoT" prompt) and has a text reasoning model
(DeepSeek-R1) think over that description; the cold-start data is description + CoT + answer.
Here the image's ground truth (the scene's objects) is the description, written cell by cell
in reading order, and the reasoning over it is computed from the same ground truth:

    <think>
    The image is a 5x5 grid with 4 objects. Row 1, column 2: a red circle. Row 2, column 5:
    the number 7. ... The numbers are 7 and 3. 7 + 3 = 10.
    </think>
    <answer>10</answer>
"""

from __future__ import annotations

import random
import re
from typing import Any, Literal

from agentic_rl.envs.vision.scenes import (
    COLOURS,
    SHAPES,
    SIZE,
    Cell,
    VisualQAEnv,
    answer_matches,
    checked_question_kinds,
    scene_of,
    scene_split,
)
from agentic_rl.types import Action, Task

Split = Literal["train", "eval"]
KINDS = ("sum", "count_colour", "count_shape")
SYSTEM = (
    "Look at the 5x5 grid image. Think step by step inside <think> </think>, then write the "
    "answer as <answer>number</answer>."
)
_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)


def _scene(rng: random.Random) -> dict[Cell, tuple[str, str]]:
    cells = [(r, c) for r in range(SIZE) for c in range(SIZE)]
    chosen = rng.sample(cells, rng.randint(3, 7))
    objects: dict[Cell, tuple[str, str]] = {}
    for cell in chosen:
        if rng.random() < 0.6:
            objects[cell] = (rng.choice(SHAPES), rng.choice(list(COLOURS)))
        else:
            objects[cell] = ("digit", str(rng.randint(1, 9)))
    return objects


def _question(
    objects: dict[Cell, tuple[str, str]], kind: str, rng: random.Random
) -> tuple[str, str, str] | None:
    """(question, answer, target counted or "") of `kind`, or None if the scene cannot ask it."""
    shapes = [obj for obj in objects.values() if obj[0] != "digit"]
    digits = [int(obj[1]) for obj in objects.values() if obj[0] == "digit"]
    if kind == "sum":
        if len(digits) < 2:
            return None
        return "What is the sum of the numbers in the grid?", str(sum(digits)), ""
    if not shapes:
        return None
    if kind == "count_colour":
        colour = rng.choice(shapes)[1]
        count = sum(s[1] == colour for s in shapes)
        return f"How many {colour} shapes are there?", str(count), colour
    if kind == "count_shape":
        shape = rng.choice(shapes)[0]
        return f"How many {shape}s are there?", str(sum(s[0] == shape for s in shapes)), shape
    raise ValueError(f"unknown question kind {kind!r}")


def make_visual_reasoning_tasks(
    split: Split, n: int, seed: int = 0, *, kinds: list[str] | None = None
) -> list[Task]:
    """`n` scene questions for `split` (scenes disjoint between train and eval), the kinds in
    turn (default all of KINDS). Each task: `fields = {"objects": [[row, col, kind, value]],
    "kind", "target"}` (target: the colour or shape counted, "" for sums)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    kinds = checked_question_kinds(kinds, KINDS, KINDS)
    rng = random.Random(f"visual_reasoning/{split}/{seed}")
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
        question, answer, target = asked
        fields = {
            "objects": [[r, c, k, v] for (r, c), (k, v) in sorted(objects.items())],
            "kind": kind,
            "target": target,
        }
        tasks.append(Task(f"vr-{split}-{seed}-{len(tasks)}", question, [answer], fields))
    raise RuntimeError(f"could not generate {n} {split} visual reasoning questions")


def _where(cell: Cell) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"


def describe(objects: dict[Cell, tuple[str, str]]) -> str:
    """The detailed text description of a scene (modality bridging): every object, in reading
    order."""
    parts = [f"The image is a 5x5 grid with {len(objects)} objects."]
    for cell, (kind, value) in sorted(objects.items()):
        article = "an" if value[0] in "aeiou" else "a"
        what = f"the number {value}" if kind == "digit" else f"{article} {value} {kind}"
        parts.append(f"{_where(cell)[0].upper()}{_where(cell)[1:]}: {what}.")
    return " ".join(parts)


def _listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def reason(objects: dict[Cell, tuple[str, str]], kind: str, target: str) -> str:
    """The chain of thought over the description that reaches the answer."""
    if kind == "sum":
        digits = [v for k, v in (objects[c] for c in sorted(objects)) if k == "digit"]
        return (
            f"The numbers are {_listing(digits)}. {' + '.join(digits)} = {sum(map(int, digits))}."
        )
    index = 1 if kind == "count_colour" else 0
    noun = f"{target} shapes" if kind == "count_colour" else f"{target}s"
    cells = [_where(c) for c in sorted(objects) if objects[c][index] == target]
    return f"The {noun} are in {_listing(cells)}: {len(cells)} of them."


def bridged_cot(task: Task) -> str:
    """The cold-start target: description + reasoning in <think>, then the answer."""
    objects = scene_of(task)
    thought = f"{describe(objects)} {reason(objects, task.fields['kind'], task.fields['target'])}"
    return f"<think>\n{thought}\n</think>\n<answer>{task.answers[0]}</answer>"


class VisualReasoningEnv(VisualQAEnv):
    """One reasoning question about one rendered scene; see the module docstring. The scene,
    its picture and the first observation are VisualQAEnv's; the prompt, the scoring (format and
    answer) and the expert are this env's."""

    system_prompt = SYSTEM
    usage_hint = "Think in <think></think>, then <answer>...</answer>."

    def judge(self, action: Action) -> tuple[float, dict[str, Any]]:
        """Vision-R1's reward: 1 only for the exact answer in a well-formed turn."""
        assert self.task is not None
        right = answer_matches(action.text, self.task.answers)
        # No raw text (a direct call) is judged on the answer alone.
        formatted = not action.raw or bool(_FORMAT.match(action.raw))
        reward = float(right and formatted)
        return reward, {"answered": 1, "success": reward, "format_error": float(not formatted)}

    def expert_turn(self) -> str:
        assert self.task is not None, "expert_turn() before reset()"
        return bridged_cot(self.task)

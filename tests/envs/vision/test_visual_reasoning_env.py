"""The Vision-R1 env (envs/vision/reasoning.py): scene questions that need a chain of thought,
the modality-bridging expert, and the reward that needs both format and answer."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import make_env, task_generator
from agentic_rl.envs.vision.reasoning import (
    KINDS,
    VisualReasoningEnv,
    bridged_cot,
    describe,
    make_visual_reasoning_tasks,
    reason,
)
from agentic_rl.envs.vision.scenes import CELL, COLOURS, scene_of
from agentic_rl.model.images import load_image
from agentic_rl.types import Action, Task


def test_check_env_and_registry(tmp_path):
    env = VisualReasoningEnv(image_dir=str(tmp_path))
    check_env(env, make_visual_reasoning_tasks("train", 9))
    assert isinstance(make_env("visual_reasoning", image_dir=str(tmp_path)), VisualReasoningEnv)
    assert task_generator("visual_reasoning") is make_visual_reasoning_tasks


def test_splits_are_disjoint_and_cover_every_kind():
    train = make_visual_reasoning_tasks("train", 90)
    held_out = make_visual_reasoning_tasks("eval", 30)
    assert not {repr(t.fields["objects"]) for t in train} & {
        repr(t.fields["objects"]) for t in held_out
    }
    assert {t.fields["kind"] for t in train} == set(KINDS)
    assert make_visual_reasoning_tasks("train", 90) == train


def test_the_bridge_describes_the_image_and_reasons_to_the_answer():
    # hand-made scene: two digits and three shapes
    objects = {
        (0, 1): ("circle", "red"),
        (1, 4): ("digit", "7"),
        (2, 2): ("square", "red"),
        (4, 0): ("digit", "3"),
        (4, 3): ("circle", "orange"),
    }
    text = describe(objects)
    assert text.startswith("The image is a 5x5 grid with 5 objects. Row 1, column 2: a red circle.")
    assert "Row 2, column 5: the number 7." in text and "an orange circle" in text
    assert reason(objects, "sum", "") == "The numbers are 7 and 3. 7 + 3 = 10."
    assert reason(objects, "count_colour", "red") == (
        "The red shapes are in row 1, column 2 and row 3, column 3: 2 of them."
    )
    assert reason(objects, "count_shape", "circle").endswith(": 2 of them.")
    task = Task(
        "t",
        "What is the sum of the numbers in the grid?",
        ["10"],
        {
            "objects": [[r, c, k, v] for (r, c), (k, v) in objects.items()],
            "kind": "sum",
            "target": "",
        },
    )
    assert (
        bridged_cot(task)
        == f"<think>\n{text} The numbers are 7 and 3. 7 + 3 = 10.\n</think>\n<answer>10</answer>"
    )


def test_the_image_shows_what_the_description_says(tmp_path):
    env = VisualReasoningEnv(image_dir=str(tmp_path))
    task = make_visual_reasoning_tasks("train", 1, kinds=["count_colour"])[0]
    image = load_image(env.reset(task, 0).images[0])
    for (r, c), (kind, value) in scene_of(task).items():
        if kind != "digit":
            assert image.getpixel((c * CELL + CELL // 2, r * CELL + CELL // 2)) == COLOURS[value]


@pytest.mark.parametrize(
    ("raw", "reward", "format_error"),
    [
        ("<think>\n3 + 4 = 7\n</think>\n<answer>ANSWER</answer>", 1.0, 0.0),
        ("<answer>ANSWER</answer>", 0.0, 1.0),  # right answer, no thinking: 0 (Vision-R1)
        ("<think>x</think><answer>wrong</answer>", 0.0, 0.0),
        ("<think>x</think> more <think>y</think><answer>ANSWER</answer>", 1.0, 0.0),
    ],
)
def test_reward_needs_format_and_answer(tmp_path, raw, reward, format_error):
    env = VisualReasoningEnv(image_dir=str(tmp_path))
    task = make_visual_reasoning_tasks("train", 1)[0]
    env.reset(task, 0)
    raw = raw.replace("ANSWER", task.answers[0])
    text = "wrong" if "wrong" in raw else task.answers[0]
    result = env.step(Action(kind="answer", text=text, raw=raw))
    assert result.terminated and result.reward == reward
    assert result.info["format_error"] == format_error

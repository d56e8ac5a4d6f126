"""The image envs (envs/vision/scenes.py): scene questions and the grid world as a picture."""

from __future__ import annotations

import re

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import make_env, task_generator
from agentic_rl.envs.vision.scenes import (
    CAPTION_KIND,
    CELL,
    COLOURS,
    QUESTION_KINDS,
    VisualGridEnv,
    VisualQAEnv,
    make_visual_grid_tasks,
    make_visual_qa_tasks,
    scene_of,
    scene_split,
)
from agentic_rl.model.images import load_image
from agentic_rl.types import Action


def centre(image, cell):
    return image.getpixel((cell[1] * CELL + CELL // 2, cell[0] * CELL + CELL // 2))


def test_check_env_passes(tmp_path):
    check_env(VisualQAEnv(image_dir=str(tmp_path)), make_visual_qa_tasks("train", 10))
    check_env(VisualGridEnv(image_dir=str(tmp_path)), make_visual_grid_tasks("train", 5))


def test_registered(tmp_path):
    assert isinstance(make_env("visual_qa", image_dir=str(tmp_path)), VisualQAEnv)
    assert isinstance(make_env("visual_grid", image_dir=str(tmp_path)), VisualGridEnv)
    assert task_generator("visual_qa") is make_visual_qa_tasks


def test_qa_splits_are_disjoint_and_cover_every_kind():
    train = make_visual_qa_tasks("train", 100)
    held_out = make_visual_qa_tasks("eval", 50)
    assert not {repr(t.fields["objects"]) for t in train} & {
        repr(t.fields["objects"]) for t in held_out
    }
    assert {t.fields["kind"] for t in train} == set(QUESTION_KINDS)
    assert make_visual_qa_tasks("train", 100) == train  # deterministic


def test_caption_lists_every_object_in_reading_order(tmp_path):
    tasks = make_visual_qa_tasks("train", 30, kinds=[CAPTION_KIND])
    assert CAPTION_KIND not in QUESTION_KINDS  # asked for by name only: the default kinds stay
    for task in tasks:
        objects = scene_of(task)
        parts = task.answers[0].split("; ")
        assert len(parts) == len(objects) >= 2
        for part, ((row, col), (kind, value)) in zip(parts, sorted(objects.items()), strict=True):
            place, what = part.split(" ", 1)
            assert place == f"{row + 1},{col + 1}"
            assert what == (f"digit {value}" if kind == "digit" else f"{value} {kind}")
        assert scene_split(objects) == "train"
    env = VisualQAEnv(image_dir=str(tmp_path))
    env.reset(tasks[0], 0)
    assert env.step(Action(kind="answer", text=tasks[0].answers[0])).reward == 1.0
    env.reset(tasks[0], 0)
    dropped = tasks[0].answers[0].rsplit("; ", 1)[0]  # one object left out: wrong
    assert env.step(Action(kind="answer", text=dropped)).reward == 0.0
    with pytest.raises(ValueError, match="unknown question kinds"):
        make_visual_qa_tasks("train", 2, kinds=["caption"])


def test_qa_image_shows_the_answer_and_the_question_does_not(tmp_path):
    env = VisualQAEnv(image_dir=str(tmp_path))
    for task in make_visual_qa_tasks("eval", 40, kinds=["colour"]):
        obs = env.reset(task, 0)
        (ref,) = obs.images
        cell = tuple(int(x) - 1 for x in re.findall(r"\d", task.prompt))
        assert scene_of(task)[cell][1] == task.answers[0]
        assert centre(load_image(ref), cell) == COLOURS[task.answers[0]]
        assert task.answers[0] not in obs.messages[-1]["content"]
    right = env.step(Action(kind="answer", text=f" {task.answers[0].upper()} "))
    assert right.reward == 1.0 and right.terminated
    env.reset(task, 0)
    bad = env.step(Action(kind="invalid", error="x"))
    assert bad.info == {"invalid_action": 1} and not bad.terminated and bad.reward == -0.1


def test_grid_observations_are_pictures_of_the_state(tmp_path):
    env = VisualGridEnv(image_dir=str(tmp_path))
    task = make_visual_grid_tasks("train", 1)[0]
    first = env.reset(task, 0)
    assert not re.search(r"\d", first.messages[-1]["content"])  # no positions in the text
    start, goal = tuple(task.fields["start"]), tuple(task.fields["goal"])
    image = load_image(first.images[0])
    assert centre(image, start) == COLOURS["blue"] and centre(image, goal) == COLOURS["green"]
    for wall in task.fields["walls"]:
        assert centre(image, tuple(wall)) == (0, 0, 0)
    move = env.expert_turn()[len("<action>") : -len("</action>")]
    result = env.step(Action(kind="tool", name="action", arguments={"direction": move}))
    if not result.terminated:
        assert result.observation.content == "Moved." and result.observation.anchor
        after = load_image(result.observation.images[0])
        assert centre(after, env.position) == COLOURS["blue"] and env.position != start
        assert result.observation.images != first.images
    bad = env.step(Action(kind="invalid", error="no move"))
    assert bad.observation.name == "error" and "goal is" not in bad.observation.content
    assert len(bad.observation.images) == 1


@pytest.mark.parametrize("split", ["train", "eval"])
def test_grid_tasks_are_the_gridworld_layouts(split):
    from agentic_rl.envs.games.gridworld import make_gridworld_tasks

    visual, text = make_visual_grid_tasks(split, 5), make_gridworld_tasks(split, 5)
    assert [t.fields for t in visual] == [t.fields for t in text]

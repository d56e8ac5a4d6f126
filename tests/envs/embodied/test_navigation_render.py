"""VLN-R1 navigation with rendered observations (`render="image"`, navigation.py,
house_render.py): each observation carries a fixed-size top-down picture of the current state,
stored by hash; the default "text" carries none."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image

from agentic_rl.envs.check import check_env
from agentic_rl.envs.embodied.house import DELTAS, HouseMap
from agentic_rl.envs.embodied.house_render import render_house
from agentic_rl.envs.embodied.navigation import VIEW_NOTE, NavigationEnv, make_vln_tasks
from agentic_rl.model.images import load_image
from agentic_rl.types import Action, ImageRef

AGENT = (30, 60, 220)


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


@pytest.fixture(scope="module")
def tasks():
    return make_vln_tasks("train", 6, seed=0)


def check_ref(ref: ImageRef, size: int) -> Image.Image:
    assert hashlib.sha256(Path(ref.path).read_bytes()).hexdigest() == ref.sha256
    image = load_image(ref)
    assert image.size == (size, size)
    return image


def agent_centre(image: Image.Image) -> tuple[float, float]:
    """The mean position of the agent's blue pixels."""
    xs, ys = [], []
    for y in range(image.height):
        for x in range(image.width):
            if image.getpixel((x, y)) == AGENT:
                xs.append(x)
                ys.append(y)
    assert xs, "the agent is not drawn"
    return sum(xs) / len(xs), sum(ys) / len(ys)


def test_text_by_default_and_bad_options_rejected(tasks):
    env = NavigationEnv()
    first = env.reset(tasks[0], seed=0)
    assert first.images == [] and VIEW_NOTE not in first.messages[-1]["content"]
    step = env.step(act("turn-left"))
    assert step.observation is not None and step.observation.images == []
    with pytest.raises(ValueError, match="render"):
        NavigationEnv(render="video")
    with pytest.raises(ValueError, match="image_size"):
        NavigationEnv(render="image", image_size=4)


def test_image_observations_follow_the_agent(tasks, tmp_path):
    env = NavigationEnv(render="image", image_size=96, image_dir=str(tmp_path))
    assert check_env(env, tasks[:2]) == []
    for task in tasks:
        first = env.reset(task, seed=0)
        assert len(first.images) == 1 and first.messages[-1]["content"].endswith(VIEW_NOTE)
        before = check_ref(first.images[0], 96)
        start = env.pose
        # a turn changes the picture (the heading) but not where the agent stands
        turned = env.step(act("turn-left"))
        assert turned.observation is not None and len(turned.observation.images) == 1
        after_turn = check_ref(turned.observation.images[0], 96)
        assert turned.observation.images[0].sha256 != first.images[0].sha256
        centre = agent_centre(before)
        assert abs(agent_centre(after_turn)[0] - centre[0]) < 16
        # a forward step that moves the agent moves its triangle by one cell that way
        pose = env.pose
        moved = env.step(act("forward"))
        if env.pose == pose:
            continue  # walked into a wall: the picture is the turned one
        assert moved.observation is not None and moved.observation.content.endswith(VIEW_NOTE)
        after_move = check_ref(moved.observation.images[0], 96)
        assert moved.observation.images[0].sha256 != turned.observation.images[0].sha256
        dr, dc = DELTAS[pose[2]]
        (x0, y0), (x1, y1) = agent_centre(after_turn), agent_centre(after_move)
        cell = (96 - 4) // max(env.house.rows, env.house.cols)
        assert abs((x1 - x0) - dc * cell) < 1.0 and abs((y1 - y0) - dr * cell) < 1.0
        assert start[:2] != env.pose[:2]
        break
    else:
        pytest.fail("no task moved forward after a left turn")


def test_picture_size_is_fixed_whatever_the_house(tmp_path):
    for rows, cols, room in [(1, 2, 2), (2, 2, 2), (3, 3, 3)]:
        task = make_vln_tasks("train", 1, room_rows=rows, room_cols=cols, room_size=room)[0]
        house = HouseMap(task.fields["house"])
        image = render_house(house, tuple(task.fields["start"]), size=128)
        assert image.size == (128, 128)
        for r, c in house.landmarks:  # every landmark is drawn (its brown diamond)
            cell = (128 - 4) // max(house.rows, house.cols)
            left = (128 - cell * house.cols) // 2 + c * cell
            top = (128 - cell * house.rows) // 2 + r * cell
            beside_initial = (left + cell // 2 + cell // 4, top + cell // 2)  # in the diamond
            if (r, c) != tuple(task.fields["start"][:2]):
                assert image.getpixel(beside_initial) == (150, 90, 30)
    env = NavigationEnv(render="image", image_dir=str(tmp_path))
    env.reset(make_vln_tasks("train", 1)[0], seed=0)
    step = env.step(act("forward"))
    assert step.observation is not None
    assert load_image(step.observation.images[0]).size == (128, 128)

"""The patch VQ image tokenizer and VPRL's image-planning env (envs/vision/patch_vq.py,
envs/vision/image_planning.py): codes round-trip, the move is inferred from two pictures, and the
progress reward pays 1 / 0 / -5."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from agentic_rl.envs.check import check_env
from agentic_rl.envs.code_words import CODE_WORDS, CodeParseError, code_word_ids
from agentic_rl.envs.games.gridworld import shortest_path
from agentic_rl.envs.vision.image_planning import (
    ImagePlanningEnv,
    grid_vq,
    infer_move,
    make_image_planning_tasks,
    read_cells,
)
from agentic_rl.envs.vision.patch_vq import PatchVQ, kmeans
from agentic_rl.envs.vision.scenes import render_grid
from agentic_rl.types import Action, Task


def test_weighted_kmeans_by_hand():
    # 1-D points 0, 1 (weight 3) and 10, 12 (weight 1 each): the centres are the weighted means
    # 0.75 = (0 + 3 * 1) / 4 and 11 = (10 + 12) / 2.
    points = np.array([[0.0], [1.0], [10.0], [12.0]])
    weights = np.array([1.0, 3.0, 1.0, 1.0])
    centres = sorted(float(c) for c in kmeans(points, weights, k=2, seed=0)[:, 0])
    assert centres == pytest.approx([0.75, 11.0])
    # no more centres than points: every point is its own centre
    assert kmeans(points[:2], weights[:2], k=5).tolist() == [[0.0], [1.0]]


def test_patch_vq_encodes_decodes_and_parses():
    red = np.zeros((2, 2, 3), np.uint8) + np.array([200, 0, 0], np.uint8)
    blue = np.zeros((2, 2, 3), np.uint8) + np.array([0, 0, 200], np.uint8)
    image = Image.fromarray(np.concatenate([np.concatenate([red, blue], 1)] * 2, 0))  # 4x4
    vq = PatchVQ.fit([image], k=8, patch=2)
    assert vq.size == 2  # two distinct patches
    codes = vq.encode(image)
    assert len(codes) == 4 and codes[0] == codes[2] != codes[1] == codes[3]
    assert np.array_equal(np.asarray(vq.decode(codes, (2, 2))), np.asarray(image))
    text = vq.to_text(codes)
    assert text == "".join(" " + CODE_WORDS[c] for c in codes)
    assert vq.parse(text, 4) == codes
    with pytest.raises(CodeParseError, match="expected 4 image tokens, got 3"):
        vq.parse(" ".join(text.split()[:3]), 4)
    with pytest.raises(CodeParseError, match="'banana' is not an image token"):
        vq.parse(text.rsplit(" ", 1)[0] + " banana", 4)
    with pytest.raises(CodeParseError, match=r"code 5, out of range \(codes 0..1\)"):
        vq.parse(" ".join([CODE_WORDS[5]] * 4), 4)
    with pytest.raises(ValueError, match="not a multiple"):
        vq.encode(Image.new("RGB", (5, 4)))


def test_grid_codes_are_one_token_each_and_read_back_exactly(tokenizer):
    vq = grid_vq()
    code_word_ids(tokenizer, vq.size)  # raises if a code is not exactly one token
    for task in make_image_planning_tasks("eval", 10):
        walls = {tuple(w) for w in task.fields["walls"]}
        goal = tuple(task.fields["goal"])
        for position in [tuple(task.fields["start"]), goal]:
            image = render_grid(walls, position, goal)
            assert len(vq.encode(image)) == 25
            cells = read_cells(vq.decode(vq.encode(image), (5, 5)))
            assert {c for c, k in cells.items() if k == "wall"} == walls
            assert [c for c, k in cells.items() if k == "agent"] == [position]
            assert [c for c, k in cells.items() if k == "goal"] == (
                [] if position == goal else [goal]
            )


def cells_of(walls, agent, goal):
    return read_cells(render_grid(walls, agent, goal))


def test_move_is_inferred_from_two_pictures():
    walls, goal = {(0, 0), (2, 2)}, (4, 4)
    assert infer_move(walls, (1, 1), goal, cells_of(walls, (1, 2), goal)) == ("right", "")
    assert infer_move(walls, (4, 3), goal, cells_of(walls, goal, goal)) == ("right", "")
    cases = {
        "did not move": cells_of(walls, (1, 1), goal),
        "jumped": cells_of(walls, (3, 1), goal),
        "walls changed": cells_of({(0, 0)}, (1, 2), goal),
        "goal moved": cells_of(walls, (1, 2), (3, 3)),
        "shows 2 agents": {**cells_of(walls, (1, 2), goal), (3, 3): "agent"},
    }
    for why, cells in cases.items():
        move, reason = infer_move(walls, (1, 1), goal, cells)
        assert move is None and why in reason
    # into a wall: the wall cell would show the agent, so the walls changed
    move, reason = infer_move(walls, (2, 1), goal, cells_of(walls - {(2, 2)}, (2, 2), goal))
    assert move is None and "walls" in reason


TASK = Task(
    task_id="t",
    prompt="",
    fields={"walls": [[0, 1], [1, 1], [3, 3]], "start": [0, 0], "goal": [2, 0]},
)


def state(env, position):
    return Action(kind="tool", name="state", arguments={"tokens": env.picture_tokens(position)})


def test_progress_reward_and_optimal_plan():
    env = ImagePlanningEnv()
    first = env.reset(TASK, seed=0)
    assert first.messages[1]["content"] == f"The grid:{env.picture_tokens()}"
    assert env.optimal_length == 2
    away = env.step(state(env, (0, 0)))  # no move: invalid, state kept, picture shown again
    assert away.reward == -5.0 and not away.terminated and env.position == (0, 0)
    assert away.info["invalid_action"] == 1 and away.info["env/malformed_pictures"] == 0
    assert env.picture_tokens() in away.observation.content
    closer = env.step(state(env, (1, 0)))
    assert closer.reward == 1.0 and closer.info["env/progress_moves"] == 1.0
    assert closer.observation.content == "" and env.position == (1, 0)
    done = env.step(state(env, (2, 0)))
    assert done.terminated and done.reward == 1.0 and done.info["success"] == 1.0
    assert done.info["env/optimal_plan"] == 0.0  # 3 turns (one invalid) for a 2-move plan

    env.reset(TASK, seed=0)
    assert env.step(state(env, (1, 0))).reward == 1.0
    assert env.step(state(env, (2, 0))).info["env/optimal_plan"] == 1.0

    env.reset(TASK, seed=0)
    env.step(state(env, (1, 0)))
    back = env.step(state(env, (0, 0)))  # valid but away from the goal
    assert back.reward == 0.0 and back.info["env/progress_moves"] == 0.0


def test_malformed_pictures_are_observations_not_crashes():
    env = ImagePlanningEnv(invalid_reward=-2.0)
    env.reset(TASK, seed=0)
    for action in [
        Action(kind="tool", name="state", arguments={"tokens": "up"}),
        Action(kind="answer", text="done"),
        Action(kind="invalid", error="<state> is never closed"),
    ]:
        result = env.step(action)
        assert result.reward == -2.0 and not result.terminated
        assert result.info["env/malformed_pictures"] == 1.0
        assert result.observation.content.startswith("Invalid picture")


def test_check_env_and_noisy_expert():
    tasks = make_image_planning_tasks("train", 6)
    skipped = check_env(ImagePlanningEnv(), tasks, max_expert_turns=6)
    assert skipped == ["gold answer scores >= a wrong one (the tasks have no gold answers)"]
    env = ImagePlanningEnv(expert_noise=1.0)  # a pure random walk: every picture is legal
    for task in tasks:
        env.reset(task, seed=0)
        for _ in range(6):
            tokens = env.expert_turn().removeprefix("<state>").removesuffix("</state>")
            result = env.step(Action(kind="tool", name="state", arguments={"tokens": tokens}))
            assert result.reward in (0.0, 1.0)
            if result.terminated:
                break
    with pytest.raises(ValueError, match="format_penalty"):
        ImagePlanningEnv(format_penalty=0.1)
    with pytest.raises(ValueError, match="expert_noise"):
        ImagePlanningEnv(expert_noise=2.0)


def test_tasks_are_grid_world_layouts():
    tasks = make_image_planning_tasks("eval", 5)
    for task in tasks:
        walls = {tuple(w) for w in task.fields["walls"]}
        path = shortest_path(walls, tuple(task.fields["start"]), tuple(task.fields["goal"]))
        assert task.fields["plan"] == path and task.answers == []

"""The VLN-R1 navigation env (envs/embodied/navigation.py) and its houses (envs/embodied/house.py):
generated houses, route instructions, 6-action chunks executed in order, the time-decayed chunk
reward, the expert."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.embodied.house import (
    ACTIONS,
    FORWARD,
    LEFT,
    RIGHT,
    STOP,
    HouseMap,
    shortest_path,
    step_pose,
)
from agentic_rl.envs.embodied.navigation import NavigationEnv, make_vln_tasks
from agentic_rl.envs.registry import env_class, task_generator
from agentic_rl.formats.chat import TagFormat
from agentic_rl.rewards.time_decay import time_decay_reward
from agentic_rl.types import Action


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


@pytest.fixture(scope="module")
def tasks():
    return make_vln_tasks("train", 20, seed=0)


def test_registered_and_check_env_passes(tasks):
    assert env_class("vln") is NavigationEnv and task_generator("vln") is make_vln_tasks
    assert check_env(NavigationEnv(), tasks) == []


def test_tasks_are_seeded_held_out_and_within_the_path_limits(tasks):
    again = make_vln_tasks("train", 20, seed=0)
    assert [t.fields for t in again] == [t.fields for t in tasks]
    held_out = make_vln_tasks("eval", 20, seed=0)
    assert not {str(t.fields) for t in held_out} & {str(t.fields) for t in tasks}
    for task in tasks:
        path = task.answers[0].split()
        assert 4 <= len(path) <= 12 and path[-1] == "stop"
        assert task.prompt.endswith(".") and "stop at the" in task.prompt


def test_house_walls_doors_and_observation():
    spec = {
        "room_rows": 1,
        "room_cols": 2,
        "room_size": 2,
        "rooms": [[0, 0, "kitchen"], [0, 1, "bedroom"]],
        "doors": [[[0, 1], [0, 2]]],  # between (0, 1) in the kitchen and (0, 2) in the bedroom
        "landmarks": [[1, 0, "fridge"], [0, 3, "bed"]],
    }
    house = HouseMap(spec)
    assert house.passable((0, 1), (0, 2)) and not house.passable((1, 1), (1, 2))
    assert step_pose(house, (1, 1, 1), FORWARD) == (1, 1, 1)  # a wall: no move
    assert step_pose(house, (0, 1, 1), FORWARD) == (0, 2, 1)  # through the door
    assert step_pose(house, (0, 1, 1), LEFT) == (0, 1, 0)
    assert step_pose(house, (0, 1, 0), RIGHT) == (0, 1, 1)
    assert house.describe((0, 1), 1) == "a door to the bedroom"
    assert house.describe((0, 0), 2) == "the fridge"
    assert house.in_view((0, 0), 1) == "the bed, three steps ahead"  # through the door
    # facing north at (1, 1): right (east) is a wall, forward, turn right, 2 x forward, stop
    assert shortest_path(house, (1, 1, 0), (0, 3)) == [FORWARD, RIGHT, FORWARD, FORWARD, STOP]


def test_a_chunk_of_six_runs_in_order_with_the_decayed_reward(tasks):
    env = NavigationEnv(decay=0.5)
    task = tasks[0]
    env.reset(task, 0)
    expert = env.expert_actions()[:6]
    # the expert's chunk with its first action swapped for another: executed in order
    wrong = [LEFT if expert[0] != LEFT else RIGHT, *expert[1:]]
    names = " || ".join(ACTIONS[a] for a in wrong)
    result = env.step(act(names))
    ran = wrong[: wrong.index(STOP) + 1] if STOP in wrong else wrong  # a stop ends the chunk
    assert env.executed == ran
    assert result.info["tdr"] == pytest.approx(time_decay_reward(wrong, expert, 0.5))
    # episode_reward "mean": the first turn's reward is its TDR as a share of the expert's
    best = time_decay_reward(expert, expert, 0.5)
    assert result.reward == pytest.approx(result.info["tdr"] / best)
    assert result.info["chunk_score"] == pytest.approx(result.info["tdr"] / best)
    summed = NavigationEnv(decay=0.5, episode_reward="sum")  # the raw TDR
    summed.reset(task, 0)
    assert summed.step(act(names)).reward == pytest.approx(result.info["tdr"])


def test_mean_episode_reward_is_the_running_mean_of_chunk_scores(tasks):
    # hand-computed: a path of > 6 actions; turn 1 = the expert's chunk (score 1), turn 2 an
    # invalid turn (score 0, -0.1 format penalty), turn 3 = the expert's chunk again
    task = next(t for t in tasks if len(t.answers[0].split()) > 6)
    env = NavigationEnv(success_reward=1.0)
    env.reset(task, 0)
    first = env.step(act(env.expert_turn().split("<action>")[1].split("</action>")[0]))
    assert first.reward == pytest.approx(1.0)  # mean 1
    second = env.step(act("fly away"))
    assert second.reward == pytest.approx(0.5 - 1.0 - 0.1)  # mean 1 -> 1/2, penalty
    rest = env.expert_actions()[:6]
    third = env.step(act(" || ".join(ACTIONS[a] for a in rest)))
    if third.terminated:  # the expert stops on the goal: + success_reward
        assert third.reward == pytest.approx(2 / 3 - 0.5 + 1.0)
    else:
        assert third.reward == pytest.approx(2 / 3 - 0.5)
    with pytest.raises(ValueError, match="episode_reward"):
        NavigationEnv(episode_reward="max")


def test_route_mean_pays_stopping_early_a_share_of_the_route(tasks):
    # a route of 7-12 actions takes 2 chunks of 6. Stopping after the expert's first 5 actions:
    # chunk share s = (1 + .5 + .25 + .125 + .0625) / (that + .03125) (the 6th is a mismatch);
    # "mean" pays s, "route_mean" s / max(1 chunk played, 2 route chunks)
    task = next(t for t in tasks if len(t.answers[0].split()) > 6)
    s = 1.9375 / 1.96875
    rewards = {}
    for mode in ("mean", "route_mean"):
        env = NavigationEnv(decay=0.5, episode_reward=mode)
        env.reset(task, 0)
        assert env.route_chunks == 2
        early = [*env.expert_actions()[:5], STOP]
        result = env.step(act(" || ".join(ACTIONS[a] for a in early)))
        assert result.terminated and not env._success()
        rewards[mode] = result.reward
    assert rewards["mean"] == pytest.approx(s) and rewards["route_mean"] == pytest.approx(s / 2)
    # the expert's pace: 1/2 after its first chunk, then (1 + 1) / 2 and the success reward
    env = NavigationEnv(decay=0.5, episode_reward="route_mean", success_reward=1.0)
    env.reset(task, 0)
    total = []
    while not env.done:
        total.append(env.step(act(" || ".join(ACTIONS[a] for a in env.expert_actions()[:6]))))
    assert [r.reward for r in total] == pytest.approx([0.5, 0.5 + 1.0]) and env._success()
    # walking past the route: a third chunk divides by 3 chunks played
    env = NavigationEnv(decay=0.5, episode_reward="route_mean")
    env.reset(task, 0)
    env.step(act(" || ".join(ACTIONS[a] for a in env.expert_actions()[:6])))  # share 1
    env.step(act("turn-left"))  # share 0 against the expert's next chunk
    third = env.step(act(" || ".join(ACTIONS[a] for a in env.expert_actions()[:6])))
    assert env.chunk_scores[0] == 1.0 and env.chunk_scores[1] == 0.0
    value = sum(env.chunk_scores) / 3
    bonus = 1.0 if env._success() else 0.0
    assert third.reward == pytest.approx(value - 0.5 + bonus)


def test_extra_actions_are_dropped_with_the_format_penalty(tasks):
    env = NavigationEnv(chunk_size=6, max_steps=24)
    env.reset(tasks[1], 0)
    result = env.step(act(" || ".join(["turn-left"] * 8)))
    assert result.info["actions"] == 6 and result.info["invalid_action"] == 1
    expert = env_expert(tasks[1])
    share = time_decay_reward([LEFT] * 6, expert, 0.8) / time_decay_reward(expert, expert, 0.8)
    assert result.reward == pytest.approx(share - 0.1)


def env_expert(task):
    env = NavigationEnv()
    env.reset(task, 0)
    return env.expert_actions()[:6]


def test_turn_spellings_parse_and_garbage_is_an_error_observation(tasks):
    env = NavigationEnv()
    env.reset(tasks[2], 0)
    assert env.parse_token("turn left") == LEFT and env.parse_token("Turn_Right") == RIGHT
    result = env.step(act("fly away"))
    assert result.observation.name == "error" and result.info["invalid_action"] == 1
    assert not result.terminated and result.reward == pytest.approx(-0.1)


def test_expert_succeeds_in_chunks_and_stop_elsewhere_fails(tasks):
    fmt = TagFormat(NavigationEnv().tools)
    for task in tasks:
        env = NavigationEnv()
        env.reset(task, 0)
        turns = 0
        while not env.done:
            result = env.step(fmt.parse(env.expert_turn(), "stop"))
            turns += 1
        assert result.info["success"] == 1.0
        assert turns == -(-len(task.answers[0].split()) // 6)  # 6 actions per turn
    env = NavigationEnv()
    env.reset(tasks[0], 0)
    result = env.step(act("stop"))
    assert result.terminated and result.info["success"] == 0.0

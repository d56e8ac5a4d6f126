"""The TextWorld household env: layouts, compiled and cached games, admissible commands, the
walkthrough expert, success reward and anchor states."""

import json

import pytest

pytest.importorskip("textworld")

from agentic_rl.envs.check import check_env  # noqa: E402
from agentic_rl.envs.registry import ENVS, TASKS  # noqa: E402
from agentic_rl.envs.worlds.household import (  # noqa: E402
    HouseholdEnv,
    game_file,
    make_household_tasks,
    walkthrough,
)
from agentic_rl.types import Action  # noqa: E402


def act(text):
    return Action(kind="tool", name="action", arguments={"actions": text})


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("household"))


@pytest.fixture(scope="module")
def tasks():
    return make_household_tasks("train", 3, seed=0)


def test_tasks_are_seeded_disjoint_and_within_the_walkthrough_bounds():
    train = make_household_tasks("train", 20, seed=0, max_walkthrough=5)
    assert [t.fields for t in train] == [
        t.fields for t in make_household_tasks("train", 20, seed=0, max_walkthrough=5)
    ]
    evals = make_household_tasks("eval", 20, seed=0, max_walkthrough=5)
    assert not {t.fields["layout"] for t in train} & {t.fields["layout"] for t in evals}
    for task in train:
        plan = walkthrough(json.loads(task.fields["layout"]))
        assert 2 <= len(plan) <= 5 and task.answers == [" || ".join(plan)]
        assert task.prompt.startswith("put the ")
    with pytest.raises(ValueError, match="split"):
        make_household_tasks("test", 1)


def test_registered_and_passes_check_env(cache, tasks):
    assert ENVS["household"] is HouseholdEnv and TASKS["household"] is make_household_tasks
    assert check_env(HouseholdEnv(max_actions_per_turn=2, cache_dir=cache), tasks) == []


def test_games_are_compiled_once_and_cached(cache, tasks, monkeypatch):
    layout = json.loads(tasks[0].fields["layout"])
    path = game_file(layout, cache)
    assert path.exists() and path.with_suffix(".json").exists()
    import agentic_rl.envs.worlds.household as household

    monkeypatch.setattr(household, "build_game", lambda layout: pytest.fail("recompiled"))
    assert game_file(layout, cache) == path


def test_admissible_commands_expert_and_success_reward(cache, tasks):
    env = HouseholdEnv(cache_dir=cache)
    task = tasks[0]
    obs = env.reset(task, seed=0)
    text = obs.messages[-1]["content"]
    assert f"Task: {task.prompt}." in text and "Admissible commands: " in text
    assert all(not c.startswith(("examine", "look", "inventory")) for c in env.action_names)
    plan = task.answers[0].split(" || ")
    first = env.expert_turn().removeprefix("<action>").removesuffix("</action>")
    assert first in plan and first in env.action_names  # the engine may reorder the walkthrough
    rewards = []
    for command in plan:
        assert command in env.action_names  # the walkthrough's commands are admissible
        result = env.step(act(command))
        rewards.append(result.reward)
    assert rewards == [0.0] * (len(plan) - 1) + [1.0]
    assert result.terminated and result.info["success"] == 1.0


def test_inadmissible_commands_are_invalid_and_the_expert_replans(cache, tasks):
    env = HouseholdEnv(max_actions_per_turn=3, cache_dir=cache)
    env.reset(tasks[0], seed=0)
    start = env.anchor_key()
    result = env.step(act("fly to the moon"))
    assert result.reward == pytest.approx(-0.1) and result.info["invalid_action"] == 1
    assert result.observation.name == "error" and env.anchor_key() == start
    # a valid command and an invalid one in one turn: the valid one runs, the turn is penalised
    detour = next(c for c in env.action_names if c.startswith(("go ", "open ", "take ")))
    result = env.step(act(f"{detour} || dance"))
    assert result.info["actions"] == 1 and result.reward == pytest.approx(-0.1)
    assert env.anchor_key() != start and isinstance(env.anchor_key(), tuple)
    for _ in range(8):  # the engine re-plans the walkthrough from the new state
        if env.done:
            break
        turn = env.expert_turn()
        result = env.step(act(turn.removeprefix("<action>").removesuffix("</action>")))
    assert env.done and result.info["success"] == 1.0


def test_same_state_same_anchor_across_episodes(cache, tasks):
    one, two = HouseholdEnv(cache_dir=cache), HouseholdEnv(cache_dir=cache)
    one.reset(tasks[1], seed=0)
    two.reset(tasks[1], seed=5)
    assert one.anchor_key() == two.anchor_key()
    assert one.state_text() == two.state_text()
    command = tasks[1].answers[0].split(" || ")[0]
    one.step(act(command))
    assert one.anchor_key() != two.anchor_key()
    two.step(act(command))
    assert one.anchor_key() == two.anchor_key()

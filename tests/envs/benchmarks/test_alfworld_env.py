"""ALFWorld from a data folder in the official layout (envs/benchmarks/alfworld.py), on the small
fixture tests/alfworld_fixture.py writes (never on the real game files): ALFWorld's names, its
choice of games per split, check_env, the walkthroughs reaching the goal, per-task-type success,
commands outside the admissible list, and the errors a user's data can cause.

The engine tests skip, saying why, where TextWorld's PDDL engine (fast-downward-textworld) or the
alfworld package (ALFRED's domain and grammar for the fixture) is missing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from alfworld_fixture import GAMES, write_alfworld_data

from agentic_rl.envs.benchmarks.alfworld import (
    ALFWorldDataError,
    ALFWorldEnv,
    data_root,
    demangled_names,
    make_alfworld_tasks,
    parse_task_types,
    split_games,
)
from agentic_rl.envs.benchmarks.jvm import BenchmarkUnavailable
from agentic_rl.envs.check import check_env
from agentic_rl.envs.registry import ENVS, TASKS, make_env, split_options
from agentic_rl.errors import UserInputError
from agentic_rl.types import Action, Task


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


def play_expert(env: ALFWorldEnv):
    results = []
    while not results or not (results[-1].terminated or results[-1].truncated):
        results.append(env.step(act(env.expert_turn()[len("<action>") : -len("</action>")])))
    return results


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The fixture's data folder (its path as text, as env.options.data_dir takes it)."""
    pytest.importorskip("fast_downward", reason="needs TextWorld's PDDL engine (fast-downward)")
    return str(write_alfworld_data(tmp_path_factory.mktemp("alfworld")))


@pytest.fixture(autouse=True)
def no_alfworld_data_variable(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


# -- pure parts (no engine) ------------------------------------------------------------------


def test_alfworlds_names_number_instances_in_reverse_sorted_order():
    ids = [
        "mug_bar__plus_01_dot_00",  # sorts after ..._minus_... : numbered first
        "mug_bar__minus_01_dot_00",
        "mug_bar__plus_02_dot_00",
        "sink_bar__plus_01_dot_10_bar_sinkbasin",
        "sink_bar__plus_01_dot_10",
        "agent1",
        "fridgetype",
    ]
    assert demangled_names(ids) == {
        "agent1": "agent1",
        "fridgetype": "fridgetype",
        "mug_bar__minus_01_dot_00": "mug 3",
        "mug_bar__plus_01_dot_00": "mug 2",
        "mug_bar__plus_02_dot_00": "mug 1",
        "sink_bar__plus_01_dot_10": "sink 1",
        "sink_bar__plus_01_dot_10_bar_sinkbasin": "sinkbasin 1",
    }


def test_task_types():
    assert (
        parse_task_types("all")[0] == "pick_and_place_simple" and len(parse_task_types("all")) == 6
    )
    assert parse_task_types(" pick_two_obj_and_place, look_at_obj_in_light ") == [
        "pick_two_obj_and_place",
        "look_at_obj_in_light",
    ]
    with pytest.raises(ValueError, match="unknown ALFWorld task type 'pick'; valid: pick_and"):
        parse_task_types("pick")
    with pytest.raises(ValueError, match="names a task type twice"):
        parse_task_types(["pick_and_place_simple", "pick_and_place_simple"])
    with pytest.raises(ValueError, match="task_types is empty"):
        parse_task_types(" , ")


def test_missing_or_misplaced_data_is_a_clear_user_error(tmp_path, monkeypatch):
    with pytest.raises(ALFWorldDataError, match=r"set env.options.data_dir=DIR \(or the ALFWOR"):
        data_root("")
    with pytest.raises(UserInputError, match=f"ALFWorld data folder {tmp_path / 'nope'} \\(env"):
        make_alfworld_tasks("train", 1, data_dir=str(tmp_path / "nope"))
    with pytest.raises(ALFWorldDataError, match=r"has no json_2.1.1/ folder: expected the offic"):
        ALFWorldEnv(data_dir=str(tmp_path))  # the env refuses where it is built
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))  # ALFWorld's own variable is read too
    with pytest.raises(ALFWorldDataError, match=r"\(ALFWORLD_DATA\) has no json_2.1.1/"):
        data_root("")
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    assert data_root("") == tmp_path
    with pytest.raises(ALFWorldDataError, match=r"split folder .*valid_unseen does not exist"):
        make_alfworld_tasks("eval", 1)
    with pytest.raises(ALFWorldDataError, match=r"json_2.1.1/train has no playable game of task"):
        make_alfworld_tasks("train", 1)
    trial = tmp_path / "other" / "json_2.1.1" / "train" / "a-b-c-1" / "t"
    trial.mkdir(parents=True)
    (trial / "traj_data.json").write_text("{")
    (trial / "game.tw-pddl").write_text("{}")
    with pytest.raises(ALFWorldDataError, match=r"t/traj_data.json cannot be read as JSON"):
        split_games(tmp_path / "other", "train")


def test_the_settings_are_checked():
    with pytest.raises(ValueError, match="eval_split must be one of valid_unseen, valid_seen"):
        make_alfworld_tasks("eval", 1, eval_split="test")
    with pytest.raises(ValueError, match="split must be 'train' or 'eval'"):
        make_alfworld_tasks("valid", 1)
    env_kwargs, task_kwargs = split_options("alfworld", {"data_dir": "D", "eval_split": "x"})
    assert env_kwargs == {"data_dir": "D"} and task_kwargs == {"data_dir": "D", "eval_split": "x"}


# -- on the fixture (the engine) ---------------------------------------------------------------


def test_games_are_chosen_as_alfworlds_text_env_chooses_them(data):
    train = split_games(Path(data), "train")
    # the movable trial, the unsolvable game and the trial without a game file are left out
    assert [task_type for _, task_type in train] == [
        "pick_and_place_simple",
        "pick_two_obj_and_place",
    ]
    assert all(game.startswith("train/") and game.endswith("/game.tw-pddl") for game, _ in train)


def test_splits_and_task_types_select_the_games(data):
    train = make_alfworld_tasks("train", 2, seed=1, data_dir=data)
    assert {t.fields["split"] for t in train} == {"train"}
    assert train == make_alfworld_tasks("train", 2, seed=1, data_dir=data)
    assert {t.fields["task_type"] for t in train} == {
        "pick_and_place_simple",
        "pick_two_obj_and_place",
    }
    unseen = make_alfworld_tasks("eval", 1, data_dir=data)  # ALFWorld's out-of-distribution
    assert unseen[0].fields["split"] == "valid_unseen"
    assert unseen[0].task_id.startswith("alfworld/valid_unseen/pick_heat_then_place_in_recep-")
    seen = make_alfworld_tasks("eval", 1, data_dir=data, eval_split="valid_seen")
    assert seen[0].fields["task_type"] == "pick_clean_then_place_in_recep"
    one = make_alfworld_tasks("train", 1, data_dir=data, task_types="pick_two_obj_and_place")
    assert one[0].fields["task_type"] == "pick_two_obj_and_place"
    with pytest.raises(
        ValueError,
        match="3 train tasks asked, but ALFWorld.s train split has 2 .*env.num_train_tasks",
    ):
        make_alfworld_tasks("train", 3, data_dir=data)
    with pytest.raises(ALFWorldDataError, match="no playable game of task type.*look_at_obj"):
        make_alfworld_tasks("train", 1, data_dir=data, task_types="look_at_obj_in_light")


def test_registered_and_passes_check_env_on_every_split(data):
    assert ENVS["alfworld"] is ALFWorldEnv and TASKS["alfworld"] is make_alfworld_tasks
    tasks = [
        *make_alfworld_tasks("train", 2, data_dir=data),
        *make_alfworld_tasks("eval", 1, data_dir=data, eval_split="valid_seen"),
        *make_alfworld_tasks("eval", 1, data_dir=data),
    ]
    env = make_env("alfworld", data_dir=data)
    assert check_env(env, tasks) == [
        "gold answer scores >= a wrong one (the tasks have no gold answers)"
    ]


def test_the_walkthroughs_reach_the_goal_and_score_per_task_type(data):
    env = ALFWorldEnv(data_dir=data)
    tasks = [
        *make_alfworld_tasks("train", 2, data_dir=data),
        *make_alfworld_tasks("eval", 1, data_dir=data, eval_split="valid_seen"),
        *make_alfworld_tasks("eval", 1, data_dir=data),
    ]
    walkthroughs = {g.task_type: g.walkthrough for g in GAMES}
    for task in tasks:
        opening = env.reset(task, 0).messages[1]["content"]
        assert opening.startswith("You are in the middle of a room. Looking quickly around you")
        assert "Welcome to TextWorld" not in opening and "\nYour task is to: " in opening
        results = play_expert(env)
        task_type = task.fields["task_type"]
        assert env.executed == walkthroughs[task_type]  # the game file's walkthrough, played
        assert results[-1].terminated and results[-1].info["success"] == 1.0, task.task_id
        assert [r.reward for r in results] == [0.0] * (len(results) - 1) + [1.0]
        assert sum(r.info["env/score"] for r in results) == 1.0
        key = f"env/success@{task_type}"
        assert [r.info[key] for r in results] == [0.0] * (len(results) - 1) + [1.0]


def test_the_observation_lists_alfworlds_names_and_admissible_commands(data):
    env = ALFWorldEnv(data_dir=data)
    task = make_alfworld_tasks("train", 1, data_dir=data, task_types="pick_and_place_simple")[0]
    opening = env.reset(task, 0).messages[1]["content"]
    # two countertops, numbered as ALFWorld numbers them; "help" is not listed
    assert "you see a countertop 2, a countertop 1, and a fridge 1." in opening
    assert opening.endswith(
        "Valid actions: go to countertop 1, go to countertop 2, go to fridge 1, inventory, look."
    )
    result = env.step(act("go to countertop 1"))
    assert result.observation.content.startswith(
        "> go to countertop 1\nYou arrive at countertop 1. On the countertop 1, you see a apple 1."
    )
    assert env.goal == "put some apple in fridge."


def test_a_command_outside_the_admissible_list_is_an_observation_not_a_crash(data):
    env = ALFWorldEnv(data_dir=data)
    task = make_alfworld_tasks("train", 1, data_dir=data, task_types="pick_and_place_simple")[0]
    start = env.reset(task, 0).anchor
    for wrong in ("take apple 1 from countertop 1", "help", "fly away"):
        result = env.step(act(wrong))
        assert result.observation.name == "error" and result.reward == pytest.approx(-0.1)
        assert not result.terminated and result.info["invalid_action"] == 1
        assert "Valid actions: go to countertop 1" in result.observation.content
        assert result.info["env/success@pick_and_place_simple"] == 0.0
    assert env.executed == [] and env.anchor_key() == start  # nothing reached the game
    mixed = env.step(act("go to countertop 1 || dance"))  # the valid one runs, the turn pays
    assert mixed.reward == pytest.approx(-0.1) and env.executed == ["go to countertop 1"]
    assert mixed.observation.anchor != start


def test_truncated_after_max_steps_without_success(data):
    env = ALFWorldEnv(data_dir=data, max_steps=2)
    task = make_alfworld_tasks("train", 1, data_dir=data, task_types="pick_and_place_simple")[0]
    env.reset(task, 0)
    env.step(act("look"))
    last = env.step(act("inventory"))
    assert last.truncated and not last.terminated and last.info["success"] == 0.0


def test_game_file_problems_name_the_file(data, tmp_path):
    env = ALFWorldEnv(data_dir=data)
    task = make_alfworld_tasks("train", 1, data_dir=data)[0]
    lost = Task("alfworld/x", "x", fields={**task.fields, "game": "train/none/game.tw-pddl"})
    with pytest.raises(ALFWorldDataError, match=r"game file .*train/none/game.tw-pddl \(task alf"):
        env.reset(lost, 0)
    broken = write_alfworld_data(tmp_path / "d")
    game_file = broken / "json_2.1.1" / task.fields["game"]
    game = json.loads(game_file.read_text())
    game_file.write_text(json.dumps({**game, "walkthrough": None}))
    env = ALFWorldEnv(data_dir=str(broken))
    env.reset(task, 0)
    with pytest.raises(ALFWorldDataError, match="has no walkthrough"):
        env.expert_turn()
    game_file.write_text(json.dumps({k: v for k, v in game.items() if k != "grammar"}))
    with pytest.raises(ALFWorldDataError, match="game.tw-pddl has no grammar"):
        env.reset(task, 0)
    game_file.write_text(json.dumps({**game, "pddl_problem": "(define (problem"}))
    with pytest.raises(ALFWorldDataError, match="game.tw-pddl cannot be loaded by TextWorld's"):
        env.reset(task, 0)
    game_file.write_text(json.dumps(game))  # repaired: the same env (and engine) plays it
    env.reset(task, 0)
    assert play_expert(env)[-1].info["success"] == 1.0


def test_the_engine_missing_names_the_extra(data, monkeypatch):
    monkeypatch.setitem(sys.modules, "fast_downward", None)  # import fails
    with pytest.raises(BenchmarkUnavailable, match=r"pip install 'agentic-rl\[alfworld\]'"):
        ALFWorldEnv(data_dir=data)


def test_a_closed_env_hands_its_engine_to_the_next(data):
    task = make_alfworld_tasks("train", 1, data_dir=data)[0]
    first, second = ALFWorldEnv(data_dir=data), ALFWorldEnv(data_dir=data)
    first.reset(task, 0)
    second.reset(task, 0)
    assert first.game is not second.game  # envs playing at once: an engine each
    engine = first.game
    first.close()
    first.close()  # twice is fine
    third = ALFWorldEnv(data_dir=data)
    third.reset(task, 0)
    assert third.game is engine and play_expert(third)[-1].info["success"] == 1.0
    assert play_expert(second)[-1].info["success"] == 1.0  # its own engine, untouched


def test_a_game_is_translated_once_and_sys_argv_is_left_alone(data):
    import fast_downward

    task = make_alfworld_tasks("eval", 1, data_dir=data, eval_split="valid_seen")[0]
    argv = list(sys.argv)
    ALFWorldEnv(data_dir=data).reset(task, 0)
    before = fast_downward.pddl2sas.cache_info()
    ALFWorldEnv(data_dir=data).reset(task, 0)  # another episode of the same game
    after = fast_downward.pddl2sas.cache_info()
    # a reset loads and resets the game: two translations each (plain and for re-planning)
    assert after.misses == before.misses and after.hits == before.hits + 4
    assert sys.argv == argv  # the translator sets it; the memo puts it back

"""TextWorldExpress through the wheel's own simulator (envs/benchmarks/textworld_express.py) on
small games: the benchmark's seed folds, check_env on all eight games, gold paths reaching score 1,
commands outside the valid list, bad game parameters; and the shared JVM (jvm.py): one per
process, closed by `close_jvms`, a killed one is an infrastructure failure and is replaced.

Skipped, saying why, where the `textworld-express` package or a Java runtime is missing."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("textworld_express")
if shutil.which("java") is None:
    pytest.skip(
        "needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True
    )

from agentic_rl.envs.benchmarks import jvm  # noqa: E402
from agentic_rl.envs.benchmarks.textworld_express import (  # noqa: E402
    GAMES,
    TextWorldExpressEnv,
    make_textworld_express_tasks,
    params_of,
    parse_games,
    seed_folds,
)
from agentic_rl.envs.check import check_env  # noqa: E402
from agentic_rl.envs.registry import ENVS, TASKS  # noqa: E402
from agentic_rl.tools.base import ToolInfrastructureError  # noqa: E402
from agentic_rl.types import Action  # noqa: E402

SMALL = {
    "cookingworld": "numLocations=1,numIngredients=2,numDistractorItems=2,includeDoors=0",
    "twc": "numLocations=1,numItemsToPutAway=2,includeDoors=0",
    "coin": {"numLocations": 3, "includeDoors": 0},
    "mapreader": "numLocations=3,maxDistanceApart=2,maxDistractorItemsPerLocation=0",
}


@pytest.fixture(scope="module", autouse=True)
def one_jvm():
    yield
    jvm.close_jvms()
    assert jvm.running_jvms() == 0


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


def play_expert(env: TextWorldExpressEnv):
    results = []
    while not results or not (results[-1].terminated or results[-1].truncated):
        results.append(env.step(act(env.expert_turn()[len("<action>") : -len("</action>")])))
    return results


def test_games_and_parameters():
    assert parse_games(" coin, twc ") == ["coin", "twc"]
    with pytest.raises(ValueError, match="unknown TextWorldExpress game 'zork'; valid: cooking"):
        parse_games("zork")
    assert params_of("coin", SMALL) == "numLocations=3,includeDoors=0"  # a YAML mapping
    assert params_of("sorting", SMALL) == ""  # the game's own defaults
    with pytest.raises(ValueError, match="game_params names 'coins'"):
        params_of("coin", {"coins": ""})


def test_tasks_follow_the_benchmarks_own_seed_folds():
    folds = seed_folds("coin", "numLocations=3,includeDoors=0")
    assert folds["train"][:2] == (0, 1) and folds["dev"][0] == 10000 and folds["test"][0] == 20000
    evals = make_textworld_express_tasks("eval", 3, games="coin,twc", game_params=SMALL)
    assert [t.task_id for t in evals] == [
        "textworld_express/coin/dev/10000",
        "textworld_express/twc/dev/10000",
        "textworld_express/coin/dev/10001",
    ]
    tests = make_textworld_express_tasks("eval", 1, games="coin", eval_fold="test")
    assert tests[0].fields == {"game": "coin", "params": "", "seed": 20000, "fold": "test"}
    train = make_textworld_express_tasks("train", 4, seed=1, games="coin")
    assert train == make_textworld_express_tasks("train", 4, seed=1, games="coin")
    assert train != make_textworld_express_tasks("train", 4, seed=2, games="coin")
    assert all(t.fields["seed"] in set(seed_folds("coin", "")["train"]) for t in train)


def test_parameters_the_simulator_rejects_are_value_errors():
    with pytest.raises(ValueError, match="must be less than or equal to 11"):
        make_textworld_express_tasks(
            "eval", 1, games="coin", game_params={"coin": "numLocations=99"}
        )
    with pytest.raises(ValueError, match="Unrecognized property name"):
        make_textworld_express_tasks("eval", 1, games="coin", game_params={"coin": "size=3"})
    with pytest.raises(ValueError, match="1001 eval tasks asked"):
        make_textworld_express_tasks("eval", 1001, games="coin")


def test_registered_and_passes_check_env_on_every_game():
    assert ENVS["textworld_express"] is TextWorldExpressEnv
    assert TASKS["textworld_express"] is make_textworld_express_tasks
    tasks = make_textworld_express_tasks("eval", len(GAMES), games=GAMES, game_params=SMALL)
    assert [t.fields["game"] for t in tasks] == list(GAMES)
    assert check_env(TextWorldExpressEnv(), tasks) == [
        "gold answer scores >= a wrong one (the tasks have no gold answers)"
    ]


def test_gold_paths_reach_score_1():
    env = TextWorldExpressEnv()
    for task in make_textworld_express_tasks("train", len(GAMES), games=GAMES, game_params=SMALL):
        opening = env.reset(task, 0).messages[1]["content"]
        assert opening.startswith("Task: ") and "\nValid actions: " in opening
        results = play_expert(env)
        assert results[-1].terminated and results[-1].info["success"] == 1.0, task.task_id
        assert sum(r.info["env/score"] for r in results) == pytest.approx(1.0), task.task_id
        game = task.fields["game"]  # the game's own score and success, summed over the episode
        assert sum(r.info[f"env/score@{game}"] for r in results) == pytest.approx(1.0)
        assert sum(r.info[f"env/success@{game}"] for r in results) == 1.0, task.task_id
        assert sum(r.reward for r in results) == pytest.approx(1.0), task.task_id


def test_commands_outside_the_valid_list_are_invalid_and_not_sent():
    env = TextWorldExpressEnv()
    task = make_textworld_express_tasks("eval", 1, games="coin", game_params=SMALL)[0]
    env.reset(task, 0)
    before = env.last
    result = env.step(act("dance"))
    assert result.observation.name == "error" and result.reward == pytest.approx(-0.1)
    assert "Valid actions: inventory, look around" in result.observation.content
    assert env.last is before and env.executed == []  # nothing reached the simulator
    looked = env.step(act("Look around"))
    assert looked.observation.content.startswith("> look around\nYou are in the ")
    assert env.executed == ["look around"]


def test_the_expert_mid_episode_replays_the_episode():
    env = TextWorldExpressEnv()
    task = make_textworld_express_tasks("eval", 1, games="twc", game_params=SMALL)[0]
    env.reset(task, 0)
    env.step(act("inventory"))  # off the gold path
    results = play_expert(env)
    assert results[-1].info["success"] == 1.0 and env.executed[0] == "inventory"


def test_one_jvm_serves_every_env_and_close_jvms_ends_it():
    task = make_textworld_express_tasks("eval", 1, games="coin", game_params=SMALL)[0]
    first, second = TextWorldExpressEnv(), TextWorldExpressEnv()
    first.reset(task, 0)
    second.reset(task, 0)
    assert first.sim_gateway is second.sim_gateway and first.sim is not second.sim
    assert jvm.running_jvms() >= 1
    jvm.close_jvms()
    assert jvm.running_jvms() == 0
    first.reset(task, 0)  # a new JVM, and a new simulator in it
    assert first.sim_gateway is not second.sim_gateway


def test_a_killed_jvm_is_an_infrastructure_failure_and_is_replaced():
    task = make_textworld_express_tasks("eval", 1, games="coin", game_params=SMALL)[0]
    env = TextWorldExpressEnv()
    env.reset(task, 0)
    process = jvm._jvms[next(iter(jvm._jvms))].process
    process.kill()
    process.wait()
    with pytest.raises(ToolInfrastructureError, match="JVM stopped answering"):
        env.step(act("look around"))
    fresh = TextWorldExpressEnv()
    assert fresh.reset(task, 0).messages[1]["content"].startswith("Task: ")
    assert jvm.running_jvms() == 1

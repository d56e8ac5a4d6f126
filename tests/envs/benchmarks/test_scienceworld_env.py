"""ScienceWorld through the wheel's own simulator (envs/benchmarks/scienceworld.py), on a small
slice: the benchmark's task types and variation splits, check_env, the gold path scoring 100,
a failed task counting 0, commands the simulator does not understand, ambiguous commands, the
valid-action help and the expert mid-episode. One JVM serves the module and is closed after it.

Skipped, saying why, where the `scienceworld` package or a Java runtime is missing (`make setup`
installs both; Debian: apt-get install default-jre-headless)."""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("scienceworld")
if shutil.which("java") is None:
    pytest.skip(
        "needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True
    )

from agentic_rl.envs.benchmarks import jvm  # noqa: E402
from agentic_rl.envs.benchmarks.scienceworld import (  # noqa: E402
    ScienceWorldEnv,
    benchmark_task_types,
    make_scienceworld_tasks,
    parse_task_types,
    variation_splits,
)
from agentic_rl.envs.check import check_env  # noqa: E402
from agentic_rl.envs.registry import ENVS, TASKS  # noqa: E402
from agentic_rl.types import Action  # noqa: E402

SHORT = "find-non-living-thing"  # gold paths of 3-5 commands


@pytest.fixture(scope="module", autouse=True)
def one_jvm():
    yield
    jvm.close_jvms()
    assert jvm.running_jvms() == 0


@pytest.fixture(scope="module")
def env():
    return ScienceWorldEnv()


def act(text: str) -> Action:
    return Action(kind="tool", name="action", arguments={"actions": text})


def test_the_30_task_types_and_names():
    types = benchmark_task_types()
    assert len(types) == 30 and types[0]["task_id"] == "1-1" and types[-1]["task_id"] == "10-2"
    assert parse_task_types("4-2, lifespan-longest-lived") == [
        "find-non-living-thing",
        "lifespan-longest-lived",
    ]
    assert len(parse_task_types("all")) == 30
    with pytest.raises(ValueError, match="unknown ScienceWorld task type 'nope'; valid: 1-1 boil"):
        parse_task_types("nope")


def test_tasks_follow_the_benchmarks_own_splits():
    splits = variation_splits(SHORT)
    assert {len(splits["train"]), len(splits["dev"]), len(splits["test"])} == {150, 75}
    assert not set(splits["train"]) & set(splits["dev"]) and not set(splits["dev"]) & set(
        splits["test"]
    )
    evals = make_scienceworld_tasks("eval", 3, task_types=f"{SHORT},lifespan-longest-lived")
    assert [t.task_id for t in evals] == [
        f"scienceworld/{SHORT}/dev/{splits['dev'][0]}",
        f"scienceworld/lifespan-longest-lived/dev/{variation_splits('lifespan-longest-lived')['dev'][0]}",
        f"scienceworld/{SHORT}/dev/{splits['dev'][1]}",
    ]
    tests = make_scienceworld_tasks("eval", 2, task_types=SHORT, eval_fold="test")
    assert [t.fields["variation"] for t in tests] == list(splits["test"][:2])
    train = make_scienceworld_tasks("train", 5, seed=3, task_types=SHORT)
    assert train == make_scienceworld_tasks("train", 5, seed=3, task_types=SHORT)
    assert train != make_scienceworld_tasks("train", 5, seed=4, task_types=SHORT)
    assert {t.fields["variation"] for t in train} <= set(splits["train"])


def test_bad_task_options_are_value_errors():
    with pytest.raises(ValueError, match="76 eval tasks asked, but the 1 task type"):
        make_scienceworld_tasks("eval", 76, task_types=SHORT)
    with pytest.raises(ValueError, match="eval_fold"):
        make_scienceworld_tasks("eval", 1, task_types=SHORT, eval_fold="train")
    with pytest.raises(ValueError, match="unknown ScienceWorld simplification 'fast'"):
        make_scienceworld_tasks("eval", 1, task_types=SHORT, simplifications="fast")
    with pytest.raises(ValueError, match="noElectricalAction removes .* power-component"):
        make_scienceworld_tasks(
            "eval", 1, task_types="power-component", simplifications="noElectricalAction"
        )


def test_registered_and_passes_check_env(env):
    assert ENVS["scienceworld"] is ScienceWorldEnv
    assert TASKS["scienceworld"] is make_scienceworld_tasks
    tasks = make_scienceworld_tasks("eval", 2, task_types=SHORT)
    assert check_env(env, tasks) == [
        "gold answer scores >= a wrong one (the tasks have no gold answers)"
    ]


def test_the_gold_path_scores_100(env):
    task = make_scienceworld_tasks("eval", 1, task_types=SHORT)[0]
    opening = env.reset(task, 0).messages[1]["content"]
    assert opening.startswith("Task: Your task is to find a(n) non-living thing.")
    assert "Action templates: activate OBJ" in opening
    opening_points = env.score
    rewards, points, by_type = [], [], []
    while True:
        result = env.step(act(env.expert_turn()[len("<action>") : -len("</action>")]))
        rewards.append(result.reward)
        points.append(result.info["env/score"])
        by_type.append(result.info)
        if result.terminated:
            break
    assert sum(points) == 100 and result.info["success"] == 1.0 and env.raw_score == 100
    # the task type's own score and success: summed over the episode, as the rollout sums them
    assert sum(i["env/score@find-non-living-thing"] for i in by_type) == 100
    assert [i["env/success@find-non-living-thing"] for i in by_type][-1] == 1.0
    assert sum(i["env/success@find-non-living-thing"] for i in by_type) == 1.0
    # the return: the final score less the points the opening "look around" earned, / 100
    assert sum(rewards) == pytest.approx((100 - opening_points) / 100)


def test_a_failed_task_counts_0(env):
    task = make_scienceworld_tasks("eval", 1, task_types="find-living-thing")[0]
    env.reset(task, 0)
    opening = env.score
    result = env.step(act("focus on air"))  # air is not alive: the task fails
    assert result.terminated and result.info["success"] == 0.0
    assert env.raw_score == -100 and result.info["env/score"] == 0.0
    assert result.info["env/success@find-living-thing"] == 0.0
    assert result.info["env/score@find-living-thing"] == 0.0
    assert result.reward == pytest.approx(-opening / 100)


def test_unknown_and_ambiguous_commands(env):
    task = make_scienceworld_tasks("eval", 1, task_types=SHORT)[0]
    env.reset(task, 0)
    unknown = env.step(act("fly to the moon"))
    assert unknown.observation.content == "> fly to the moon\nNo known action matches that input."
    assert unknown.info["invalid_action"] == 1 and unknown.reward == pytest.approx(-0.1)
    ambiguous = env.step(act("focus on orange"))  # one in the inventory, one in the bowl
    assert "Ambiguous request" in ambiguous.observation.content
    assert "invalid_action" not in ambiguous.info
    chosen = env.step(act("0"))  # the agent answers with the number of its choice
    assert chosen.observation.content == "> 0\nYou focus on the orange."


def test_valid_action_help_and_the_expert_mid_episode():
    env = ScienceWorldEnv(valid_actions=5)
    task = make_scienceworld_tasks("eval", 1, task_types=SHORT)[0]
    text = env.reset(task, 0).messages[1]["content"]
    shown = text.splitlines()[-1]
    assert shown.startswith("Valid actions: ") and shown.endswith("more).")
    assert len(shown.split(" (and ")[0].removeprefix("Valid actions: ").split(", ")) == 5
    plain = ScienceWorldEnv()
    plain.reset(task, 0)
    first = plain.expert_turn()
    plain.step(act(first[len("<action>") : -len("</action>")]))
    second = plain.expert_turn()  # the gold path from the state the episode reached
    env.reset(task, 0)
    env.step(act(first[len("<action>") : -len("</action>")]))
    env.gold = None
    assert env.expert_turn() == second  # asked mid-episode: reloaded with its gold path, replayed
    assert env.score == plain.score
    while not (
        result := env.step(act(env.expert_turn()[len("<action>") : -len("</action>")]))
    ).terminated:
        pass
    assert result.info["success"] == 1.0


def test_every_load_of_a_variation_is_the_same():
    """The JVM's constant identity hashes (jvm.DETERMINISTIC_HASHES): without them a second load
    of this variation in the same JVM lists objects and draws its gold path in another order."""
    task = make_scienceworld_tasks("eval", 1, task_types=SHORT)[0]
    golds = set()
    for _ in range(3):
        env = ScienceWorldEnv()
        env.reset(task, 0)
        env.expert_turn()
        golds.add(tuple(env.gold))
    assert len(golds) == 1

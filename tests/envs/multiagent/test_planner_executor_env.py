"""The planner / executor team env: roles, the protocol, the scripted team, check_env."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.multiagent.planner_executor import (
    EXECUTOR,
    PLANNER,
    PlannerExecutorEnv,
)
from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.formats.chat import TagFormat


def tasks(n: int = 3, split: str = "train"):
    return make_multihop_tasks(split, n, seed=0)


def play_expert(env: PlannerExecutorEnv, task) -> list[tuple[str, str, float]]:
    """(role, reply, reward) of every conversation of the scripted team's episode."""
    fmt = TagFormat(env.tools)
    obs = env.reset(task, seed=0)
    played = []
    while True:
        role = obs.role
        reply = env.expert_turn()
        result = env.step(fmt.parse(reply, "stop"))
        played.append((role, reply, result.reward))
        if result.terminated or result.truncated:
            return played
        obs = result.observation


def test_scripted_team_answers_with_both_roles_in_order() -> None:
    env = PlannerExecutorEnv()
    for task in tasks():
        played = play_expert(env, task)
        roles = [role for role, _, _ in played]
        assert roles == [PLANNER, EXECUTOR, EXECUTOR, PLANNER, EXECUTOR, EXECUTOR, PLANNER]
        assert played[-1][2] == 1.0  # the team's exact match
        # the executor's first report names the bridge, found by its own search
        assert task.fields["bridge"] in played[2][1]


def test_each_role_sees_only_its_own_conversation() -> None:
    env = PlannerExecutorEnv()
    fmt = TagFormat(env.tools)
    task = tasks(1)[0]
    first = env.reset(task, seed=0)
    assert first.role == PLANNER and task.prompt in first.messages[-1]["content"]
    executor = env.step(fmt.parse("<task>Who employs Ann?</task>", "stop")).observation
    assert executor.role == EXECUTOR
    text = executor.messages[-1]["content"]
    assert "Who employs Ann?" in text and task.prompt not in text  # the executor never sees it
    read = env.step(fmt.parse("<search>Ann</search>", "stop")).observation
    assert read.role == EXECUTOR and "Search results:" in read.messages[-1]["content"]
    back = env.step(fmt.parse("<report>Ann works for Acme.</report>", "stop")).observation
    assert back.role == PLANNER
    assert "Report 1: Ann works for Acme." in back.messages[-1]["content"]


def test_bad_replies_are_data_and_delegations_are_bounded() -> None:
    env = PlannerExecutorEnv(max_delegations=1)
    fmt = TagFormat(env.tools)
    env.reset(tasks(1)[0], seed=0)
    bad = env.step(fmt.parse("I think the answer is blue", "stop"))
    assert not bad.terminated and bad.info["invalid_action"] == 1.0 and bad.reward == -0.1
    assert bad.observation.role == PLANNER and bad.observation.name == "error"
    env.step(fmt.parse("<task>q</task>", "stop"))
    # an executor that does not search still reports back, so the team goes on
    failed = env.step(fmt.parse("no idea", "stop"))
    assert failed.observation.role == PLANNER and failed.info["invalid_action"] == 1.0
    assert "(the executor found nothing)" in failed.observation.messages[-1]["content"]
    assert "answer now" in failed.observation.messages[-1]["content"]
    over = env.step(fmt.parse("<task>another</task>", "stop"))
    assert over.info["invalid_action"] == 1.0 and over.observation.role == PLANNER
    wrong = env.step(fmt.parse("<answer>nowhere</answer>", "stop"))
    assert wrong.terminated and wrong.reward == 0.0 and wrong.info["success"] == 0.0


def test_check_env_passes() -> None:
    env = PlannerExecutorEnv()
    assert check_env(env, tasks(2), max_expert_turns=8) == []


def test_a_task_of_another_world_is_refused() -> None:
    env = PlannerExecutorEnv(corpus_seed=1)
    with pytest.raises(ValueError, match="corpus_seed"):
        env.reset(tasks(1)[0], seed=0)

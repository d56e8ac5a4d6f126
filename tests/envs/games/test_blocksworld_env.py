"""Blocksworld: the STRIPS rules, the BFS solver against brute force, the plan checker, the
problem generator (difficulty = optimal plan length, train/eval disjoint), text round trips,
the env protocol (check_env) and the knowledge tool."""

from __future__ import annotations

import itertools

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.blocksworld import (
    BlocksworldEnv,
    knowledge_rule,
    make_blocksworld_tasks,
    task_problem,
)
from agentic_rl.envs.games.blocksworld_domain import (
    apply_action,
    check_plan,
    goal_progress,
    legal_actions,
    parse_state,
    solve,
    state_text,
)
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.types import Action

# blue on red, red and orange on the table, hand empty
START = frozenset(
    {
        ("handempty",),
        ("clear", "blue"),
        ("clear", "orange"),
        ("on", "blue", "red"),
        ("ontable", "red"),
        ("ontable", "orange"),
    }
)
GOAL = [("on", "red", "orange")]


def act(name):
    return Action(kind="tool", name="action", arguments={"actions": name})


def test_rules_and_preconditions():
    assert sorted(legal_actions(START, ["red", "blue", "orange"])) == [
        "pick up the orange block",
        "unstack the blue block from on top of the red block",
    ]
    assert apply_action(START, "pick up the red block") is None  # blue is on it
    held = apply_action(START, "unstack the blue block from on top of the red block")
    assert held == frozenset(
        {
            ("holding", "blue"),
            ("clear", "red"),
            ("clear", "orange"),
            ("ontable", "red"),
            ("ontable", "orange"),
        }
    )
    assert apply_action(held, "pick up the orange block") is None  # the hand is full
    stacked = apply_action(held, "stack the blue block on top of the orange block")
    assert ("on", "blue", "orange") in stacked and ("clear", "orange") not in stacked


def brute_force_length(state, goal, limit=8):
    """The shortest plan length by trying every action sequence (the solver's reference)."""
    for length in range(limit + 1):
        frontier = [state]
        for _ in range(length):
            frontier = [apply_action(s, a) for s in frontier for a in legal_actions(s)]
        if any(set(goal) <= s for s in frontier):
            return length
    return None


def test_solver_is_optimal_and_checked():
    plan = solve(START, GOAL)
    assert plan == [
        "unstack the blue block from on top of the red block",
        "put down the blue block",
        "pick up the red block",
        "stack the red block on top of the orange block",
    ]
    assert len(plan) == brute_force_length(START, GOAL)
    assert check_plan(START, GOAL, plan) == (True, True)
    assert check_plan(START, GOAL, plan[:-1]) == (True, False)
    assert check_plan(START, GOAL, ["pick up the red block"]) == (False, False)
    for task in make_blocksworld_tasks("eval", 6, seed=1, num_blocks=3, max_plan=4):
        init, goal = task_problem(task)
        assert task.fields["plan_length"] == brute_force_length(init, goal, limit=4)


def test_problems_by_difficulty_and_disjoint():
    train = make_blocksworld_tasks("train", 30, seed=0, min_plan=2, max_plan=6)
    evals = make_blocksworld_tasks("eval", 30, seed=0, min_plan=2, max_plan=6)
    assert {t.fields["plan_length"] for t in evals} == {2, 4, 6}  # spread over the lengths
    assert not {t.prompt for t in train} & {t.prompt for t in evals}
    assert make_blocksworld_tasks("eval", 5, seed=0)[0].prompt == evals[0].prompt  # seeded
    for task in evals:
        init, goal = task_problem(task)
        plan = task.answers[0].split("\n")
        assert check_plan(init, goal, plan) == (True, True)
        assert len(plan) == task.fields["plan_length"]
    with pytest.raises(ValueError, match="num_blocks"):
        make_blocksworld_tasks("eval", 1, num_blocks=1)


def test_text_round_trip_and_progress():
    assert parse_state(state_text(START)) == START
    noisy = "I have that, the Blue block is clear, the hand is empty and the purple block is clear"
    assert parse_state(noisy) == {("clear", "blue"), ("handempty",)}
    assert parse_state("no facts here") == frozenset()
    assert goal_progress(START, [("on", "blue", "red"), ("on", "red", "orange")]) == 0.5


def test_env_protocol_expert_and_noop():
    assert ENVS["blocksworld"] is BlocksworldEnv
    tasks = TASKS["blocksworld"]("eval", 10, 0)
    assert check_env(make_env("blocksworld"), tasks) == []
    env = BlocksworldEnv()
    env.reset(tasks[0], seed=0)
    before = env.state
    result = env.step(act("stack the red block on top of the red block"))  # not an action
    assert result.observation.name == "error" and env.state == before
    illegal = next(a for a in env.action_names if apply_action(env.state, a) is None)
    result = env.step(act(illegal))  # preconditions fail: a no-op
    assert env.state == before and result.reward == 0.0 and not result.terminated
    for name in tasks[0].answers[0].split("\n"):
        result = env.step(act(name))
    assert result.terminated and result.reward == 1.0 and result.info["success"] == 1.0


def test_knowledge_tool_answers_with_a_rule():
    env = BlocksworldEnv(knowledge=True)
    task = make_blocksworld_tasks("eval", 1, seed=0)[0]
    env.reset(task, seed=0)
    result = env.step(Action(kind="tool", name="knowledge", arguments={"topic": "help"}))
    assert result.observation.content.startswith("When ") and "should" in result.observation.content
    assert result.info["knowledge_call"] == 1 and env.steps == 0  # consulting is not acting
    assert "unstack the blue block" in knowledge_rule(START, GOAL)
    plain = BlocksworldEnv()
    plain.reset(task, seed=0)
    assert (
        plain.step(Action(kind="tool", name="knowledge", arguments={"topic": "x"})).observation.name
        == "error"
    )


def test_planning_text_interface():
    env = BlocksworldEnv(num_blocks=3)
    init = START
    task = make_blocksworld_tasks("eval", 1, seed=0, num_blocks=3)[0]
    env.reset(task, seed=0)
    env.state, env.goal = init, GOAL
    root = env.plan_root()
    assert env.plan_parse("the blue block is clear. blah " + root) == root
    assert sorted(env.plan_actions(root)) == sorted(legal_actions(init, env.blocks))
    nxt = env.plan_transition(root, "unstack the blue block from on top of the red block")
    assert "holding the blue block" in nxt
    assert env.plan_transition(root, "pick up the red block") == ""
    assert env.plan_progress(root) == (0.0, False)
    final = state_text(
        apply_action(
            apply_action(parse_state(nxt), "put down the blue block"), "pick up the red block"
        )
    )
    final = env.plan_transition(final, "stack the red block on top of the orange block")
    assert env.plan_progress(final) == (1.0, True)
    assert list(itertools.islice(env.action_names, 1)) == ["pick up the red block"]

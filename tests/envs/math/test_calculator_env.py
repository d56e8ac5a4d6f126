"""CalculatorEnv: task generation, reward parsing, step semantics and the expert."""

import re

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks, parse_number
from agentic_rl.envs.registry import ENVS, TASKS, make_env
from agentic_rl.tools.calculator import evaluate
from agentic_rl.types import Action, Task

PENS = Task(
    task_id="pens",
    prompt="A shop sells 37 boxes with 48 pens each and 129 loose pens. How many pens in total?",
    answers=["1905"],
    fields={"expression": "37 * 48 + 129"},
)


def test_check_env_passes():
    check_env(CalculatorEnv(), make_calculator_tasks("eval", 40, seed=0) + [PENS])


def test_tasks_are_deterministic_per_seed():
    first = make_calculator_tasks("train", 50, seed=3)
    assert first == make_calculator_tasks("train", 50, seed=3)
    assert [t.prompt for t in first] != [t.prompt for t in make_calculator_tasks("train", 50, 4)]


def test_splits_are_disjoint_and_prompts_unique():
    train = {t.prompt for seed in (0, 1) for t in make_calculator_tasks("train", 1500, seed)}
    evals = [t.prompt for seed in (0, 1) for t in make_calculator_tasks("eval", 400, seed)]
    assert len(make_calculator_tasks("eval", 400, 0)) == 400
    assert len({t.prompt for t in make_calculator_tasks("eval", 400, 0)}) == 400
    assert train.isdisjoint(evals)


def test_tasks_are_well_formed():
    tasks = make_calculator_tasks("train", 300, seed=0)
    assert len({t.fields["template"] for t in tasks}) >= 6
    assert len({t.task_id for t in tasks}) == 300
    for task in tasks:
        expression = task.fields["expression"]
        assert evaluate(expression) == int(task.answers[0]) >= 0
        assert 2 <= len(re.findall(r"[-+*/]", expression)) <= 3  # two or three operations
        assert all(int(n) >= 10 for n in re.findall(r"\d+", task.prompt))


def test_bad_split():
    with pytest.raises(ValueError, match="split must be 'train' or 'eval'"):
        make_calculator_tasks("test", 3, 0)


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("1905", 1.0),
        ("1,905 pens", 1.0),
        ("$1 905", 1.0),
        ("1905.0", 1.0),
        (" 1905 ", 1.0),
        ("1904", 0.0),
        ("1905 or 1906", 0.0),  # listing candidates is not an answer
        ("", 0.0),
        ("nineteen hundred five", 0.0),
    ],
)
def test_score_answer(text, reward):
    env = CalculatorEnv()
    env.reset(PENS, seed=0)
    assert env.score_answer(text) == reward


def test_parse_number():
    assert parse_number("-12") == -12.0
    assert parse_number("12,345,678") == 12345678.0
    assert parse_number("3.5 kg") == 3.5
    assert parse_number("no digits") is None


def test_expert_episode():
    env = CalculatorEnv()
    first = env.reset(PENS, seed=0)
    assert [m["role"] for m in first.messages] == ["system", "user"]
    assert "<calc>expression</calc>" in first.messages[0]["content"]
    assert first.messages[1]["content"] == PENS.prompt
    assert env.expert_turn() == "<calc>37 * 48 + 129</calc>"
    result = env.step(Action("tool", name="calc", arguments={"expression": "37 * 48 + 129"}))
    assert result.observation.content == "1905"
    assert result.observation.name == "calc"
    assert (result.reward, result.terminated, result.info) == (
        0.0,
        False,
        {"tool_call": 1, "tool_error": 0},
    )
    assert env.expert_turn() == "<answer>1905</answer>"
    result = env.step(Action("answer", text="1905"))
    assert (result.reward, result.terminated, result.observation) == (1.0, True, None)
    assert result.info["success"] == 1.0


def test_bad_actions_are_penalised_not_raised():
    env = CalculatorEnv(format_penalty=0.25)
    env.reset(PENS, seed=0)
    invalid = env.step(Action("invalid", error="unclosed <calc> tag"))
    assert invalid.observation.name == "error"
    assert invalid.observation.content == (
        "Invalid action: unclosed <calc> tag. Use <calc>...</calc> or <answer>...</answer>."
    )
    assert (invalid.reward, invalid.terminated, invalid.info) == (
        -0.25,
        False,
        {"invalid_action": 1},
    )
    unknown = env.step(Action("tool", name="python", arguments={"code": "1"}))
    assert unknown.observation.content == (
        "Invalid action: unknown tool 'python'. Available tools: calc."
    )
    assert (unknown.reward, unknown.info) == (-0.25, {"invalid_action": 1})
    failing = env.step(Action("tool", name="calc", arguments={"expression": "a + 1"}))
    assert failing.observation.content.startswith("Error: unknown name 'a'")
    assert (failing.reward, failing.info) == (0.0, {"tool_call": 1, "tool_error": 1})
    bad_args = env.step(Action("tool", name="calc", arguments={"expr": "1"}))
    assert bad_args.info["tool_error"] == 1
    assert "missing required argument(s): expression" in bad_args.observation.content
    stop = env.step(Action("none"))
    assert (stop.reward, stop.terminated, stop.info["no_action"]) == (-0.25, True, 1)


def test_tool_call_reward_and_wrong_answer():
    env = CalculatorEnv(tool_call_reward=0.05)
    env.reset(PENS, seed=0)
    assert env.step(Action("tool", name="calc", arguments={"expression": "1+1"})).reward == 0.05
    wrong = env.step(Action("answer", text="1900"))
    assert (wrong.reward, wrong.terminated, wrong.info["success"]) == (0.0, True, 0.0)


def test_step_outside_an_episode_raises():
    env = CalculatorEnv()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step(Action("answer", text="1"))
    env.reset(PENS, seed=0)
    env.step(Action("answer", text="1"))
    with pytest.raises(RuntimeError, match="after the episode terminated"):
        env.step(Action("answer", text="1"))


def test_make_env_and_tables():
    assert isinstance(make_env("calculator", format_penalty=0.5), CalculatorEnv)
    assert make_env("calculator", format_penalty=0.5).format_penalty == 0.5
    assert set(ENVS) == set(TASKS) >= {"calculator", "search_qa"}
    with pytest.raises(ValueError, match="unknown env 'nope'; valid names: .*calculator, "):
        make_env("nope")

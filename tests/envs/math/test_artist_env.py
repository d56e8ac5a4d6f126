"""MultiToolMathEnv: python + calc in the hermes format, ARTIST's reward (hand-computed)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.math.artist import MultiToolMathEnv, calculator_expression
from agentic_rl.envs.math.problems import make_math_tasks
from agentic_rl.formats.tir import MultiToolHermesFormat
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.types import Task

TASK = Task(
    task_id="t",
    prompt="Compute 123 × 456.",
    answers=["56088"],
    fields={"code": "print(123 * 456)", "category": "arithmetic", "template": "products"},
)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, SandboxLimits(timeout_s=2.0, memory_mb=512)) as pool:
        yield pool


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def play(env: MultiToolMathEnv, turns: list[str], finish: str = "stop"):
    fmt = MultiToolHermesFormat(env.tools, tokenizer=None)
    env.reset(TASK, seed=0)
    results = [env.step(fmt.parse(text, finish)) for text in turns]
    return results[-1]


def test_check_env_and_tools(pool):
    env = MultiToolMathEnv(runner=pool)
    assert [t.name for t in env.tools] == ["python", "calc"]
    assert '"name": "calc"' in env.system_prompt() and '"name": "python"' in env.system_prompt()
    check_env(env, [TASK, *make_math_tasks("eval", 6, seed=0)])


@pytest.mark.parametrize(
    ("turns", "reward"),
    [
        # correct, 1 call ok, well formed: 1 + 0.5 * 1 + 0.2 * 1
        ([call("calc", expression="123 * 456"), "<answer>56088</answer>"], 1.7),
        # the calculator refuses (division by zero): 1 + 0.5 * 0 + 0.2 * 1
        ([call("calc", expression="1 / 0"), "<answer>56088</answer>"], 1.2),
        # a python cell that raises counts as a failed call: 1 + 0.5 * 1/2 + 0.2
        (
            [call("python", code="1 / 0"), call("python", code="print(123 * 456)")]
            + ["<answer>56088</answer>"],
            1.45,
        ),
        # unparsable call (an invalid turn), then a good call, wrong: 0 + 0.5 * 1 + 0.2 * 1/2
        (
            [
                "<tool_call>{oops</tool_call>",
                call("calc", expression="2 + 2"),
                "<answer>4</answer>",
            ],
            0.6,
        ),
        # a direct correct answer: no call gives no tool term, format 1: 1 + 0 + 0.2
        (["<answer>56088</answer>"], 1.2),
    ],
)
def test_artist_reward_hand_computed(pool, turns, reward):
    result = play(MultiToolMathEnv(runner=pool), turns)
    assert result.terminated and result.reward == pytest.approx(reward)


def test_steps_give_nothing_until_the_end_and_a_cut_episode_is_a_wrong_answer(pool):
    env = MultiToolMathEnv(runner=pool)
    first = play(env, [call("calc", expression="6 * 7")])
    assert first.reward == 0.0 and first.observation.content == "42"
    bad = env.step(MultiToolHermesFormat(env.tools, None).parse("<tool_call>x</tool_call>", "stop"))
    assert bad.reward == 0.0 and bad.info == {"invalid_action": 1}
    # cut here: wrong answer, 1 call ok, format 1/2: 0.5 + 0.1
    assert env.truncation_reward() == pytest.approx(0.6)
    # stopping without an action is a wrong answer too
    assert play(env, [call("calc", expression="6 * 7"), "I am done."], "eos").reward == 0.7


def test_success_is_correctness_whatever_the_weights(pool):
    env = MultiToolMathEnv(runner=pool, w_answer=0.5, w_tool=0.0, w_format=0.0)
    right = play(env, ["<answer>56088</answer>"])
    assert right.reward == 0.5 and right.info["success"] == 1.0
    wrong = play(
        MultiToolMathEnv(runner=pool, w_tool=2.0),
        [call("calc", expression="1"), "<answer>1</answer>"],
    )
    assert wrong.reward == pytest.approx(2.2) and wrong.info["success"] == 0.0


def test_expert_picks_the_tool():
    assert calculator_expression("print(20 ** 5)", "3200000") == "20 ** 5"
    assert calculator_expression("print(123 * 456)", "1") is None  # not the gold value
    assert calculator_expression("print(pow(6, 5, 7))", "6") is None  # calc has no functions
    assert calculator_expression("n = 3\nprint(n)", "3") is None  # a program, not a print
    env = MultiToolMathEnv(runner=object())  # the expert never runs code
    env.reset(TASK, seed=0)
    assert env.expert_turn() == "<calc>123 * 456</calc>"
    lcm = Task("l", "lcm?", ["12"], {"code": "import math\nprint(math.lcm(4, 6))"})
    env.reset(lcm, seed=0)
    assert env.expert_turn() == "<python>import math\nprint(math.lcm(4, 6))</python>"

"""MathToolEnv (sandboxed python tool, ReTool / hermes formats) and TextOnlyMathEnv."""

from __future__ import annotations

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.math.interpreter import MathToolEnv, TextOnlyMathEnv, answer_is_correct
from agentic_rl.envs.math.problems import make_math_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.formats.tir import MultiToolHermesFormat, ReToolFormat
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


def test_check_env_passes(pool):
    check_env(MathToolEnv(runner=pool), [TASK, *make_math_tasks("eval", 6, seed=0)])
    check_env(TextOnlyMathEnv(), [TASK, *make_math_tasks("eval", 6, seed=0)])


def test_answer_is_correct():
    assert answer_is_correct("56088", ["56088"])
    assert answer_is_correct("\\boxed{56,088}", ["56088"])
    assert answer_is_correct("Answer: 56088", ["56088"])
    assert not answer_is_correct("56089", ["56088"])


def play(env: MathToolEnv, fmt: ReToolFormat, text: str, reason: str = "stop"):
    return env.step(fmt.parse(text, reason))


def test_retool_episode_pm1(pool):
    env = MathToolEnv(runner=pool)
    fmt = ReToolFormat(env.tools)
    env.reset(TASK, seed=0)
    result = play(env, fmt, "I compute.\n<code>\n```python\nprint(123 * 456)\n```\n</code>")
    assert result.observation.content == "56088" and not result.terminated
    assert fmt.render_observation(result.observation) == "\n<interpreter>\n56088\n</interpreter>\n"
    result = play(env, fmt, "So the result is \\boxed{56088}.", "eos")
    assert result.terminated and result.reward == 1.0 and result.info["success"] == 1.0
    env.reset(TASK, seed=0)
    assert play(env, fmt, "\\boxed{5}", "eos").reward == -1.0


def test_binary_score_shaping_and_no_answer(pool):
    env = MathToolEnv(runner=pool, score="binary")
    fmt = ReToolFormat(env.tools)
    env.reset(TASK, seed=0)
    assert play(env, fmt, "\\boxed{1}", "eos").reward == 0.0
    env.reset(TASK, seed=0)
    assert play(env, fmt, "no idea", "eos").reward == 0.0  # no answer: the wrong value
    shaped = MathToolEnv(runner=pool, shaping=True)
    shaped.reset(TASK, seed=0)
    for _ in range(2):
        play(shaped, fmt, "<code>print(1)</code>")
    # wrong after 2 calls: turns = 6, min(-0.6, -1 + (6 - 2) / 2 * 0.1) = -0.8
    assert play(shaped, fmt, "\\boxed{1}", "eos").reward == pytest.approx(-0.8)
    shaped.reset(TASK, seed=0)
    assert play(shaped, fmt, "I give up.", "eos").reward == -1.0  # no call: no lift


def test_code_errors_and_invalid_turns_are_observations(pool):
    env = MathToolEnv(runner=pool)
    fmt = ReToolFormat(env.tools)
    env.reset(TASK, seed=0)
    result = play(env, fmt, "<code>1 / 0</code>")
    assert result.observation.content == "Error: ZeroDivisionError: division by zero"
    assert result.info == {"tool_call": 1, "tool_error": 0}  # a code error is a valid call
    result = play(env, fmt, "<code>print(1)", "length")
    assert result.reward == -0.1 and result.info == {"invalid_action": 1}
    assert "\\boxed{...}" in result.observation.content and result.observation.name == "error"


def test_ignored_extra_calls_are_reported(pool):
    env = MathToolEnv(runner=pool)
    fmt = ReToolFormat(env.tools)
    env.reset(TASK, seed=0)
    result = play(env, fmt, "<code>print(1)</code><code>print(2)</code>")
    assert result.observation.content.startswith("1\nNote: 1 more tool call(s)")
    assert result.info["ignored_tool_calls"] == 1


def test_hermes_format_episode(pool):
    env = MathToolEnv(runner=pool, action_format="hermes_multi")
    assert '"name": "python"' in env.system_prompt()
    fmt = MultiToolHermesFormat(env.tools, tokenizer=None)
    env.reset(TASK, seed=0)
    bad = env.step(fmt.parse('<tool_call>{"name": "python", "arguments": {}}</tool_call>', "stop"))
    assert "missing required argument(s): code" in bad.observation.content
    assert "<tool_call>" in bad.observation.content  # the usage hint names hermes syntax
    call = '<tool_call>{"name": "python", "arguments": {"code": "print(123 * 456)"}}</tool_call>'
    assert env.step(fmt.parse(call, "stop")).observation.content == "56088"
    done = env.step(fmt.parse("<answer>\\boxed{56088}</answer>", "stop"))
    assert done.reward == 1.0


def test_expert_demonstration_in_retool_syntax(pool):
    """The rollout's expert actor: tag text -> TagFormat -> ReToolFormat text -> parse -> step."""
    env = MathToolEnv(runner=pool)
    fmt, tags = ReToolFormat(env.tools), TagFormat(env.tools)
    env.reset(TASK, seed=0)
    turns = []
    for _ in range(3):
        rendered = fmt.render_action(tags.parse(env.expert_turn(), "stop"))
        turns.append(rendered)
        result = env.step(fmt.parse(rendered, "stop"))
        if result.terminated:
            break
    assert turns == ["<code>\n```python\nprint(123 * 456)\n```\n</code>", "\\boxed{56088}"]
    assert result.reward == 1.0


def test_text_only_env():
    env = TextOnlyMathEnv(score="binary")
    fmt = ReToolFormat(tool_name=None)
    assert env.tools == [] and "\\boxed" in env.system_prompt()
    env.reset(TASK, seed=0)
    assert env.step(fmt.parse("<code>x</code> so \\boxed{56088}", "eos")).reward == 1.0
    env.reset(TASK, seed=0)
    assert env.expert_turn() == "<answer>56088</answer>"


def test_bad_arguments():
    with pytest.raises(ValueError):
        MathToolEnv(score="pm2")
    with pytest.raises(ValueError):
        MathToolEnv(action_format="tags")
    with pytest.raises(ValueError):
        TextOnlyMathEnv(score="x")

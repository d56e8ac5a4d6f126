"""ReTool, validated multi-tool hermes and SWE-RL chat formats."""

from __future__ import annotations

import pytest

from agentic_rl.formats.chat import TagFormat
from agentic_rl.formats.registry import CHAT_FORMATS, make_chat_format
from agentic_rl.formats.tir import (
    MultiToolHermesFormat,
    ReToolFormat,
    SweRLFormat,
    hermes_tools_prompt,
    ignored_tool_calls,
)
from agentic_rl.tools.base import FunctionTool
from agentic_rl.types import Action, Observation

PYTHON = FunctionTool(
    fn=lambda code: code,
    name="python",
    description="Run Python.",
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string"}},
        "required": ["code"],
        "additionalProperties": False,
    },
)
WEATHER = FunctionTool(
    fn=lambda city, days=1: f"{city}: sunny for {days} days",
    name="weather",
    description="Forecast for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)


@pytest.fixture
def retool():
    return ReToolFormat([PYTHON])


def test_retool_stops_and_result_tag(retool):
    assert retool.stop == ["</code>", "</answer>"]
    text = retool.render_observation(Observation(content="42", name="python"))
    assert text == "\n<interpreter>\n42\n</interpreter>\n"
    assert ReToolFormat(tool_name=None).stop == ["</answer>"]


@pytest.mark.parametrize(
    ("text", "reason", "kind", "value"),
    [
        (
            "Let me compute.\n<code>\n```python\nprint(6 * 7)\n```\n</code>",
            "stop",
            "tool",
            "print(6 * 7)",
        ),
        ("<code>print(1)</code>", "stop", "tool", "print(1)"),  # fences are optional
        ("So the answer is \\boxed{42}.", "eos", "answer", "42"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "eos", "answer", "\\frac{1}{2}"),
        ("<answer>\\boxed{7}</answer>", "stop", "answer", "7"),
        ("<answer>7</answer>", "stop", "answer", "7"),
        ("guess \\boxed{3}, check: <code>print(3)</code>", "stop", "tool", "print(3)"),
        ("<code>print(1)", "length", "invalid", "<code> is never closed with </code>"),
        ("<code>```python\n```</code>", "stop", "invalid", "empty <code> block"),
        ("<answer>7", "length", "invalid", "<answer> is never closed"),
        ("I am not sure.", "eos", "none", ""),
        ("I am not sure.", "length", "invalid", "no code block and no \\boxed{} answer"),
    ],
)
def test_retool_parse(retool, text, reason, kind, value):
    action = retool.parse(text, reason)
    assert action.kind == kind and action.raw == text
    got = {"tool": action.arguments.get("code"), "answer": action.text}.get(kind, action.error)
    assert got == value


def test_retool_text_only_ignores_code_blocks():
    fmt = ReToolFormat(tool_name=None)
    assert fmt.parse("<code>print(1)</code>", "eos").kind == "none"
    assert fmt.parse("<code>x</code> \\boxed{2}", "eos").text == "2"


def test_retool_render_round_trip(retool):
    tool = Action(kind="tool", name="python", arguments={"code": "```python\nprint(2)\n```"})
    rendered = retool.render_action(tool)
    assert rendered == "<code>\n```python\nprint(2)\n```\n</code>"
    assert retool.parse(rendered, "stop").arguments == {"code": "print(2)"}
    assert retool.render_action(Action(kind="answer", text="42")) == "\\boxed{42}"
    assert retool.parse("\\boxed{42}", "eos").text == "42"
    # the scripted expert's tag text, rendered in ReTool syntax
    expert = TagFormat([PYTHON]).parse("<python>print(2)</python>", "stop")
    assert retool.render_action(expert) == "<code>\n```python\nprint(2)\n```\n</code>"


def test_extra_code_blocks_are_ignored_and_counted(retool):
    action = retool.parse("<code>print(1)</code><code>print(2)</code><code>x</code>", "stop")
    assert action.kind == "tool" and action.arguments == {"code": "print(1)"}
    assert ignored_tool_calls(action) == 2 and "2 more tool call(s)" in action.error
    strict = ReToolFormat([PYTHON], extra_calls="invalid")
    assert strict.parse("<code>a</code><code>b</code>", "stop").kind == "invalid"
    assert ignored_tool_calls(retool.parse("<code>a</code>", "stop")) == 0


@pytest.fixture
def hermes():
    return MultiToolHermesFormat([PYTHON, WEATHER], tokenizer=None)


def call(body: str) -> str:
    return f"<tool_call>{body}</tool_call>"


@pytest.mark.parametrize(
    ("text", "kind", "detail"),
    [
        (
            call('{"name": "weather", "arguments": {"city": "Oslo", "days": 3}}'),
            "tool",
            {"city": "Oslo", "days": 3},
        ),
        (
            call('{"name": "weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}'),
            "tool",
            {"city": "Oslo"},
        ),  # double-encoded arguments
        (
            call('{"name": "weather", "arguments": {}}'),
            "invalid",
            "invalid arguments for tool 'weather': missing required argument(s): city",
        ),
        (
            call('{"name": "weather", "arguments": {"city": "Oslo", "days": "3"}}'),
            "invalid",
            "invalid arguments for tool 'weather': argument 'days' must be of type integer",
        ),
        (
            call('{"name": "weather", "arguments": {"city": "Oslo", "unit": "C"}}'),
            "invalid",
            "invalid arguments for tool 'weather': unknown argument(s): unit; expected: city, days",
        ),
        (
            call('{"name": "search", "arguments": {}}'),
            "invalid",
            "unknown tool 'search'; available: python, weather",
        ),
        (call('{"arguments": {}}'), "invalid", 'tool call needs a "name" string'),
        (call("{not json"), "invalid", "tool call is not valid JSON"),
        (
            call('{"name": "weather", "arguments": [1]}'),
            "invalid",
            "invalid arguments for tool 'weather': arguments must be an object, got list",
        ),
        ("<tool_call>{", "invalid", "<tool_call> is never closed"),
        ("<answer>Oslo</answer>", "answer", "Oslo"),
    ],
)
def test_hermes_multi_validates_calls(hermes, text, kind, detail):
    action = hermes.parse(text, "stop")
    assert action.kind == kind
    if kind == "tool":
        assert action.arguments == detail
    elif kind == "answer":
        assert action.text == detail
    else:
        assert action.error.startswith(detail)


def test_hermes_multi_extra_calls(hermes):
    good = call('{"name": "python", "arguments": {"code": "1"}}')
    action = hermes.parse(good + good + good, "stop")
    assert action.kind == "tool" and ignored_tool_calls(action) == 2
    strict = MultiToolHermesFormat([PYTHON], None, extra_calls="invalid")
    assert strict.parse(good + good, "stop").error == "2 tool calls in one turn; at most 1"


def test_hermes_multi_errors_come_back_as_tool_responses(tokenizer):
    fmt = MultiToolHermesFormat([PYTHON, WEATHER], tokenizer)
    obs = Observation(content="Invalid action: unknown tool 'x'", name="error")
    rendered = fmt.render_observation(obs)
    assert "<tool_response>\nInvalid action: unknown tool 'x'\n</tool_response>" in rendered


def test_hermes_tools_prompt_lists_every_schema():
    prompt = hermes_tools_prompt([PYTHON, WEATHER])
    assert '"name": "weather"' in prompt and '"required": ["city"]' in prompt
    assert prompt.count('"type": "function"') == 2 and "<tool_call>" in prompt


def test_swe_rl_format():
    fmt = SweRLFormat()
    text = "<think>bug</think>\n<solution>edit</solution>"
    action = fmt.parse(text, "stop")
    assert (action.kind, action.text, action.raw) == ("answer", "edit", text)
    assert fmt.parse("<think>x</think><solution>e", "length").kind == "invalid"
    assert fmt.parse("prose", "eos").kind == "none"
    assert fmt.render_action(Action(kind="answer", text=text)) == text
    assert fmt.parse(fmt.render_action(Action(kind="answer", text="e")), "stop").text == "e"


def test_make_chat_format_by_name():
    assert isinstance(make_chat_format("retool", [PYTHON], None), ReToolFormat)
    assert make_chat_format("retool_text", [], None).tool_name is None
    assert isinstance(make_chat_format("swe_rl", [], None), SweRLFormat)
    assert set(CHAT_FORMATS) >= {"tags", "hermes", "retool", "hermes_multi"}
    with pytest.raises(ValueError, match="unknown chat format"):
        make_chat_format("nope", [], None)
    with pytest.raises(ValueError, match="needs the tool"):
        ReToolFormat([WEATHER])

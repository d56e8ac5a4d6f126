"""Tool protocol, argument validation and call_tool's error, timeout and truncation handling."""

import threading
import time

import pytest

from agentic_rl.tools.base import (
    MAX_HUNG_CALLS,
    FunctionTool,
    Tool,
    ToolError,
    call_tool,
    result_tag_of,
    truncate,
    validate_arguments,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "k": {"type": "integer"},
        "weight": {"type": "number"},
        "exact": {"type": "boolean"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def make_tool(fn, name: str = "probe", parameters: dict | None = None) -> FunctionTool:
    return FunctionTool(fn, name=name, description="A test tool.", parameters=parameters or SCHEMA)


def echo(query: str, k: int = 1, weight: float = 1.0, exact: bool = False) -> str:
    return f"{query}|{k}|{weight}|{exact}"


def test_function_tool_is_a_tool_and_stringifies_results():
    tool = make_tool(lambda query: 6 * 7)
    assert isinstance(tool, Tool)
    assert tool(query="x") == "42"
    assert result_tag_of(tool) == "information"
    assert result_tag_of(make_tool(echo)) == "information"
    tagged = FunctionTool(echo, "t", "d", SCHEMA, result_tag="result")
    assert result_tag_of(tagged) == "result"


def test_result_tag_defaults_when_attribute_missing():
    class Bare:
        name, description, parameters = "bare", "no tag", {"type": "object"}

        def __call__(self, **arguments):
            return ""

    assert result_tag_of(Bare()) == "information"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"query": "a"}, None),
        ({"query": "a", "k": 3, "weight": 0.5, "exact": True}, None),
        ({"query": "a", "weight": 2}, None),  # an integer is a valid JSON number
        ({}, "missing required argument(s): query"),
        (
            {"query": "a", "limit": 3},
            "unknown argument(s): limit; expected: query, k, weight, exact",
        ),
        ({"query": 5}, "argument 'query' must be of type string"),
        ({"query": "a", "k": "3"}, "argument 'k' must be of type integer"),
        ({"query": "a", "k": True}, "argument 'k' must be of type integer"),  # bool is not int
        ({"query": "a", "weight": "x"}, "argument 'weight' must be of type number"),
        ({"query": "a", "exact": 1}, "argument 'exact' must be of type boolean"),
        (["a"], "arguments must be an object, got list"),
    ],
)
def test_validate_arguments(arguments, expected):
    assert validate_arguments(make_tool(echo), arguments) == expected


def test_unknown_keys_allowed_without_additional_properties_false():
    open_schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    assert (
        validate_arguments(make_tool(echo, parameters=open_schema), {"query": "a", "x": 1}) is None
    )


def test_call_tool_success():
    outcome = call_tool(make_tool(echo), {"query": "hi", "k": 2}, timeout_s=5.0)
    assert outcome.ok
    assert outcome.text == "hi|2|1.0|False"
    assert outcome.error == ""


def test_call_tool_times_out_quickly_on_a_hung_tool():
    tool = make_tool(lambda query: time.sleep(5) or "late", name="sleepy")
    start = time.perf_counter()
    outcome = call_tool(tool, {"query": "x"}, timeout_s=0.2)
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    assert not outcome.ok
    assert outcome.text == "Error: tool 'sleepy' timed out after 0.2 s"
    assert outcome.error == "timeout"


def test_call_tool_reports_exceptions_with_their_type():
    def broken(query: str) -> str:
        raise ValueError(f"cannot handle {query}")

    outcome = call_tool(make_tool(broken), {"query": "this"}, timeout_s=5.0)
    assert not outcome.ok
    assert outcome.text == "Error: ValueError: cannot handle this"
    assert outcome.error == "ValueError"


def test_call_tool_shows_tool_errors_without_the_type():
    def refuse(query: str) -> str:
        raise ToolError("query too vague")

    outcome = call_tool(make_tool(refuse), {"query": "x"}, timeout_s=5.0)
    assert outcome.text == "Error: query too vague"
    assert outcome.error == "ToolError"


def test_call_tool_truncates_long_error_messages():
    def shout(query: str) -> str:
        raise RuntimeError("x" * 5000)

    outcome = call_tool(make_tool(shout), {"query": "x"}, timeout_s=5.0)
    assert outcome.text.startswith("Error: RuntimeError: xxx")
    assert len(outcome.text) < 360
    assert outcome.text.endswith("characters]")


def test_call_tool_rejects_bad_arguments_without_calling():
    calls = []
    tool = make_tool(lambda query: calls.append(query) or "ran")
    outcome = call_tool(tool, {"quer": "typo"}, timeout_s=5.0)
    assert not outcome.ok
    assert outcome.error == "invalid_arguments"
    assert outcome.text == (
        "Error: invalid arguments for tool 'probe': missing required argument(s): query"
    )
    assert calls == []


def test_call_tool_truncates_long_output():
    outcome = call_tool(
        make_tool(lambda query: "ab" * 2500), {"query": "x"}, timeout_s=5.0, max_chars=100
    )
    assert outcome.ok
    assert outcome.text == "ab" * 50 + "\n... [truncated 4900 characters]"
    default = call_tool(make_tool(lambda query: "y" * 2500), {"query": "x"}, timeout_s=5.0)
    assert default.text.startswith("y" * 2000 + "\n... [truncated 500 characters]")


def test_truncate_leaves_short_text_alone():
    assert truncate("abc", 3) == "abc"
    assert truncate("abcd", 3) == "abc\n... [truncated 1 characters]"


def _tool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"tool-{name}"]


def test_hung_tools_do_not_leak_threads():
    # A hang in Python code: the timed-out thread is stopped, not left running.
    def spin() -> str:
        while True:
            time.sleep(0.01)

    tool = FunctionTool(spin, "spin", "never returns")
    for _ in range(10):
        outcome = call_tool(tool, {}, timeout_s=0.05)
        assert outcome.error == "timeout"
    deadline = time.monotonic() + 5
    while _tool_threads("spin") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _tool_threads("spin") == []
    assert call_tool(FunctionTool(lambda: "ok", "spin", "fine again"), {}, 1.0).text == "ok"


def test_a_tool_blocked_for_good_gets_a_bounded_number_of_threads():
    # Blocked in C (an Event that is never set): the thread cannot be stopped, so after
    # MAX_HUNG_CALLS such calls the tool is refused at once instead of piling up threads.
    release = threading.Event()
    tool = FunctionTool(lambda: release.wait() and "late", "stuck", "blocks")
    try:
        outcomes = [call_tool(tool, {}, timeout_s=0.05) for _ in range(MAX_HUNG_CALLS + 6)]
        assert all(o.error == "timeout" and not o.ok for o in outcomes)
        assert "unavailable" in outcomes[-1].text
        assert len(_tool_threads("stuck")) == MAX_HUNG_CALLS
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while _tool_threads("stuck") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _tool_threads("stuck") == []
    assert call_tool(tool, {}, timeout_s=1.0).ok  # usable again once the hangs ended


def test_env_action_tool_is_a_schema_the_formats_parse_and_never_runs():
    from agentic_rl.formats.chat import TagFormat
    from agentic_rl.tools.base import EnvActionTool, ToolError

    move = EnvActionTool("action", "Move.", "direction", choices=("up", "down"))
    assert move.parameters == {
        "type": "object",
        "properties": {"direction": {"type": "string", "enum": ["up", "down"]}},
        "required": ["direction"],
    }
    plain = EnvActionTool("state", "A picture.", "tokens", result_tag="seen")
    assert plain.parameters["properties"] == {"tokens": {"type": "string"}}
    action = TagFormat([move, plain]).parse("<state> a b</state>", "stop")
    assert (action.kind, action.name, action.arguments) == ("tool", "state", {"tokens": "a b"})
    with pytest.raises(ToolError, match="<action> is applied by the env's step"):
        move(direction="up")

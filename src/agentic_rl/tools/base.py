"""Tool protocol, a function wrapper, argument validation and a safe, time-limited call.

A tool is any object with `name`, `description`, `parameters` (a JSON schema object, as in
OpenAI / hermes tool definitions) and `__call__(**arguments) -> str`. Tools may raise: `call_tool`
turns every failure (bad arguments, exceptions, hangs) into an error text the agent sees, because
a bad action from the model is data, not a crash. The one exception is
`ToolInfrastructureError`: a server that is down, a timeout of a remote service, a lost worker.
That is not something the model did, so it must not become an observation the model is trained
on; `call_tool` re-raises it and the rollout ends the episode as failed (rollout/loop.py), the
collector retries it with fresh envs and drops it from training if it keeps failing
(train/collect.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

DEFAULT_RESULT_TAG = "information"
"""Tag the inline chat format wraps tool results in when a tool does not name its own."""

MAX_ERROR_CHARS = 300
MAX_HUNG_CALLS = 4
"""Calls of one tool still running past their timeout before further calls are refused."""
_hung: Counter = Counter()
_hung_lock = threading.Lock()


class ToolTimeout(BaseException):
    """Raised inside a tool's thread once its call has timed out (ends Python-level hangs)."""


@runtime_checkable
class Tool(Protocol):
    """A callable the agent can invoke. `result_tag` is optional (see `result_tag_of`)."""

    name: str
    description: str
    parameters: dict[str, Any]

    def __call__(self, **arguments: Any) -> str: ...


class ToolError(Exception):
    """A user-facing tool failure; its message is shown to the agent as is."""


class ToolInfrastructureError(Exception):
    """The tool could not run for reasons outside the model's control (its server is
    unreachable or timed out, a worker was lost). Never shown to the agent: `call_tool`
    re-raises it and the episode is retried or dropped instead of trained on."""


@dataclass
class FunctionTool:
    """Wrap a plain function as a Tool. The function's return value is converted with `str`."""

    fn: Callable[..., Any]
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    result_tag: str = DEFAULT_RESULT_TAG

    def __call__(self, **arguments: Any) -> str:
        return str(self.fn(**arguments))


@dataclass(frozen=True)
class EnvActionTool:
    """An action the env's `step` applies itself (a move, a picture, a knowledge query), declared
    as a one-argument tool so every chat format parses it (`<name>argument</name>` in the tag
    format, a JSON call in hermes). Calling it directly is an error: only the env knows what it
    does. `choices`, when given, is the argument's enum in the schema."""

    name: str
    description: str
    argument: str
    result_tag: str = "observation"
    choices: tuple[str, ...] = ()

    @property
    def parameters(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": "string"}
        if self.choices:
            spec["enum"] = list(self.choices)
        return {"type": "object", "properties": {self.argument: spec}, "required": [self.argument]}

    def __call__(self, **arguments: Any) -> str:
        raise ToolError(f"<{self.name}> is applied by the env's step(), not called as a tool")


@dataclass
class ToolOutcome:
    """Result of `call_tool`. `text` is what the agent sees; `error` is a short machine-readable
    kind ("invalid_arguments", "timeout" or the exception type) and empty when `ok`."""

    text: str
    ok: bool
    error: str = ""


def result_tag_of(tool: Tool) -> str:
    """The tag the inline chat format wraps this tool's results in."""
    return getattr(tool, "result_tag", DEFAULT_RESULT_TAG)


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    # bool is a subclass of int in Python; JSON schema keeps them apart.
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def validate_arguments(tool: Tool, arguments: Any) -> str | None:
    """Check `arguments` against the tool's JSON schema (a minimal subset).

    Checks: arguments is a dict, required keys are present, no unknown keys when
    `additionalProperties` is false, and the basic JSON types of known keys. Returns an error
    message, or None when the arguments are acceptable.
    """
    if not isinstance(arguments, dict):
        return f"arguments must be an object, got {type(arguments).__name__}"
    schema = tool.parameters or {}
    properties: dict[str, Any] = schema.get("properties", {})
    missing = [key for key in schema.get("required", []) if key not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    if schema.get("additionalProperties") is False:
        unknown = sorted(key for key in arguments if key not in properties)
        if unknown:
            return (
                f"unknown argument(s): {', '.join(unknown)}; "
                f"expected: {', '.join(properties) or 'none'}"
            )
    for key, value in arguments.items():
        expected = properties.get(key, {}).get("type")
        if expected is None:
            continue
        types = expected if isinstance(expected, list) else [expected]
        if not any(_TYPE_CHECKS.get(t, lambda _v: True)(value) for t in types):
            return f"argument '{key}' must be of type {' or '.join(types)}"
    return None


def truncate(text: str, max_chars: int) -> str:
    """Cut `text` to `max_chars` characters plus a marker saying how much was dropped."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [truncated {len(text) - max_chars} characters]"


def _error_text(exc: BaseException) -> str:
    # ToolError messages are written for the agent; other exceptions keep their type for context.
    kind = "" if isinstance(exc, ToolError) else f"{type(exc).__name__}: "
    return truncate(f"Error: {kind}{exc}", MAX_ERROR_CHARS)


def call_tool(tool: Tool, arguments: Any, timeout_s: float, max_chars: int = 2000) -> ToolOutcome:
    """Validate and run one tool call with a time limit. Raises only ToolInfrastructureError
    (the tool's infrastructure failed: not an outcome of the model's action).

    The call runs in a daemon thread: a hung tool yields a timeout outcome after `timeout_s`
    and, being a daemon, cannot block the process from exiting (a ThreadPoolExecutor would,
    since its workers are joined at exit). The timed-out thread gets ToolTimeout raised in it,
    which ends a hang in Python code at once and one blocked in C (a socket read) when that
    returns; while MAX_HUNG_CALLS calls of a tool are still running, further calls of it are
    refused instead of starting more threads. Tools that may hang for good should run out of
    process (a sandbox or server).
    """
    name = getattr(tool, "name", "?")
    problem = validate_arguments(tool, arguments)
    if problem is not None:
        text = truncate(f"Error: invalid arguments for tool '{name}': {problem}", MAX_ERROR_CHARS)
        return ToolOutcome(text=text, ok=False, error="invalid_arguments")
    with _hung_lock:
        if _hung[name] >= MAX_HUNG_CALLS:
            text = f"Error: tool '{name}' is unavailable: {_hung[name]} earlier calls still hang"
            return ToolOutcome(text=text, ok=False, error="timeout")

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = str(tool(**arguments))
        except BaseException as exc:  # any failure, even SystemExit, becomes an observation
            box["error"] = exc
        finally:
            while not box.get("done"):  # exactly once, even if ToolTimeout lands in here
                with contextlib.suppress(ToolTimeout), _hung_lock:
                    if not box.get("done"):
                        box["done"] = True
                        _hung[name] -= 1 if box.get("abandoned") else 0

    thread = threading.Thread(target=run, name=f"tool-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    with _hung_lock:
        timed_out = not box.get("done")
        if timed_out:
            box["abandoned"] = True
            _hung[name] += 1
    if timed_out:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident or 0), ctypes.py_object(ToolTimeout)
        )
        return ToolOutcome(
            text=f"Error: tool '{name}' timed out after {timeout_s:g} s", ok=False, error="timeout"
        )
    if "error" in box:
        exc = box["error"]
        if isinstance(exc, ToolInfrastructureError):
            raise exc
        return ToolOutcome(text=_error_text(exc), ok=False, error=type(exc).__name__)
    return ToolOutcome(text=truncate(box["result"], max_chars), ok=True)

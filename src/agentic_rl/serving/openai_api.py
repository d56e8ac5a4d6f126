"""The OpenAI chat-completions wire format: request validation and prompt rendering.

Pure functions over JSON and the tokenizer; replies are built in `serving/openai_reply.py`, the
HTTP layer is `serving/policy_server.py` and the token bookkeeping `serving/recorder.py`.

Tools use the hermes layout of `formats/chat.py` (the format the training loop's `hermes` chat
format speaks): the tool list goes into the system message (`hermes_tools_prompt`), the model
calls a tool as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (generation stops at
`</tool_call>`, one call per turn) and a `tool` message comes back as a `tool` turn wrapped in
`<tool_response>`. A call the model writes is returned as an OpenAI `tool_calls` entry; a
malformed one stays plain content and is counted (`invalid_tool_calls`), never an error.

Every field is validated here, at the edge (types, ranges: a `seed` must fit 64 bits, a `tools`
entry must be an object, bodies nested deeper than tools/http_guard.MAX_JSON_DEPTH are
refused), so a malformed request is a 4xx and never reaches generation, where it could fail
the other requests batched with it.

Strict on purpose: a sampling option this server would not apply (n > 1, penalties, logit
bias, streaming, forced tool choice) or an unknown field is a 400 naming it, because silently
sampling differently from what the client asked would train on the wrong distribution.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.formats.chat import HermesFormat, tool_message
from agentic_rl.formats.tir import hermes_tools_prompt
from agentic_rl.tools.http_guard import BodyError, json_depth_ok, loads_json
from agentic_rl.types import Action, Message, SamplingParams

TOOL_CALL_END = "</tool_call>"
EPISODE_ID = re.compile(r"^[A-Za-z0-9_.:@-]{1,128}$")
ROLES = ("system", "developer", "user", "assistant", "tool")
# Accepted and ignored: they do not change what is sampled.
IGNORED_FIELDS = {
    "user",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
    "stream_options",
    "safety_identifier",
    "prompt_cache_key",
}
# Accepted only at the value that means "off" (the server cannot apply anything else).
OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "stream": (False,),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "top_logprobs": (0,),
    "logit_bias": ({},),
}
SAMPLING_FIELDS = {"messages", "max_tokens", "max_completion_tokens", "temperature", "top_p"}
SAMPLING_FIELDS |= {"stop", "seed", "tools", "tool_choice", "logprobs"}
SEED_RANGE = (-(2**63), 2**63 - 1)
"""OpenAI's seed is a signed 64-bit integer; outside it torch's generator raises mid-batch."""


class ApiError(ValueError):
    """A request the server refuses; `status` is the HTTP code, `param` the offending field."""

    def __init__(self, message: str, status: int = 400, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": None}}


@dataclass(frozen=True)
class ToolSpec:
    """A function tool as the client declared it (what `hermes_tools_prompt` and
    `HermesFormat` read from a tool)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class ChatRequest:
    """A validated chat-completions request.

    `messages` are normalised: {"role", "content": str, "tool_calls": [(name, arguments)]}
    with "developer" read as "system"; `stop` holds the client's stop strings only."""

    messages: list[dict[str, Any]]
    tools: list[ToolSpec] = field(default_factory=list)
    call_tools: bool = True
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False
    episode_id: str | None = None
    model: str | None = None
    """The `model` the client named: a team server's role (policy_server.py); others ignore it."""

    def sampling(self, default_max_tokens: int) -> SamplingParams:
        stops = list(self.stop) + ([TOOL_CALL_END] if self.tools and self.call_tools else [])
        return SamplingParams(
            max_new_tokens=self.max_tokens or default_max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stops,
            seed=self.seed,
        )

    def tools_key(self) -> str:
        """The tools as they shape the prompt; an episode keeps the same ones throughout."""
        return json.dumps([vars(t) for t in self.tools], sort_keys=True)


def load_body(raw: bytes) -> Any:
    """Parse a request body: ApiError (400) for invalid JSON or nesting too deep to handle."""
    try:
        return loads_json(raw)
    except BodyError as err:
        raise ApiError(str(err), err.status) from None


def finite_number(value: Any) -> bool:
    """A JSON number (not a bool) that is finite as a float (10**400 is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _number(body: dict, key: str, low: float, high: float, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not finite_number(value) or not low <= value <= high:
        raise ApiError(f"'{key}' must be a number in [{low}, {high}], got {value!r}", param=key)
    return float(value)


def _content(value: Any, where: str) -> str:
    """Message content as text: a string, null, or a list of {"type": "text"} parts."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise ApiError(f"{where}.content: only text parts are supported", param=where)
            if not isinstance(part.get("text"), str):
                raise ApiError(f"{where}.content: a text part needs a 'text' string", param=where)
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(f"{where}.content must be a string or a list of text parts", param=where)


def _tool_calls(value: Any, where: str) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError(f"{where}.tool_calls must be a list", param=where)
    calls = []
    for j, call in enumerate(value):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ApiError(f"{where}.tool_calls[{j}] needs function.name", param=where)
        arguments = fn.get("arguments", "{}")
        if not isinstance(arguments, str):
            raise ApiError(f"{where}.tool_calls[{j}].function.arguments must be a string")
        try:
            parsed: Any = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError):
            parsed = arguments  # kept verbatim: the model may have written it that way
        if not json_depth_ok(parsed):
            raise ApiError(f"{where}.tool_calls[{j}].function.arguments is nested too deeply")
        calls.append((fn["name"], parsed))
    return calls


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise ApiError("'messages' is required and must be a non-empty list", param="messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else message
            raise ApiError(
                f"{where}: role must be one of {', '.join(ROLES)}, got {role!r}", param=where
            )
        role = "system" if message["role"] == "developer" else message["role"]
        calls = _tool_calls(message.get("tool_calls"), where) if role == "assistant" else []
        if role != "assistant" and message.get("content") is None:
            raise ApiError(f"{where}: a {role} message needs 'content'", param=where)
        out.append({"role": role, "content": _content(message.get("content"), where)})
        out[-1]["tool_calls"] = calls
    return out


def _tools(value: Any) -> list[ToolSpec]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError("'tools' must be a list of function tools", param="tools")
    specs = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise ApiError(
                f"tools[{i}] must be an object, got {type(tool).__name__}", param="tools"
            )
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, dict):
            raise ApiError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        name, params = fn.get("name"), fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ApiError(f"tools[{i}].function.name must match [A-Za-z0-9_-]{{1,64}}")
        if not isinstance(params, dict):
            raise ApiError(f"tools[{i}].function.parameters must be a JSON schema object")
        specs.append(ToolSpec(name, str(fn.get("description", "")), params))
    if len({s.name for s in specs}) != len(specs):
        raise ApiError("tool names must be distinct", param="tools")
    return specs


def _stop(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if stops is None:
        return []
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise ApiError("'stop' must be a non-empty string or a list of them", param="stop")
    if len(stops) > 4:
        raise ApiError("'stop' takes at most 4 sequences", param="stop")
    return stops


def episode_id_of(body: dict[str, Any], header: str | None) -> str | None:
    """The episode a call belongs to: the X-Episode-Id header, metadata.episode_id or `user`
    (in that order); None when the client names none (the server then matches by prefix)."""
    metadata = body.get("metadata")
    found = header or (metadata.get("episode_id") if isinstance(metadata, dict) else None)
    found = found or body.get("user")
    if found is None:
        return None
    if not isinstance(found, str) or not EPISODE_ID.fullmatch(found):
        raise ApiError(f"episode id must match {EPISODE_ID.pattern}, got {found!r}", param="user")
    return found


def parse_chat_request(raw: bytes, header_episode: str | None = None) -> ChatRequest:
    """Validate a /v1/chat/completions body; raises ApiError (4xx) naming what is wrong."""
    body = load_body(raw)
    if not isinstance(body, dict):
        raise ApiError("body must be a JSON object")
    unknown = sorted(set(body) - IGNORED_FIELDS - set(OFF_VALUES) - SAMPLING_FIELDS - {"model"})
    if unknown:
        raise ApiError(f"unsupported field(s): {', '.join(unknown)}", param=unknown[0])
    for key, allowed in OFF_VALUES.items():
        if key in body and body[key] is not None and body[key] not in allowed:
            raise ApiError(
                f"'{key}'={body[key]!r} is not supported (only {allowed[0]!r})", param=key
            )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ApiError(
            f"'max_tokens' must be a positive integer, got {max_tokens!r}", param="max_tokens"
        )
    seed = body.get("seed")
    low, high = SEED_RANGE
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high
    ):
        raise ApiError(
            f"'seed' must be an integer in [-2**63, 2**63 - 1], got {seed!r}", param="seed"
        )
    tool_choice = body.get("tool_choice", "auto")
    if tool_choice not in ("auto", "none", None):
        raise ApiError("only tool_choice 'auto' or 'none' is supported", param="tool_choice")
    if not isinstance(body.get("logprobs", False), bool):
        raise ApiError("'logprobs' must be true or false", param="logprobs")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(f"'model' must be a string, got {model!r}", param="model")
    return ChatRequest(
        messages=_messages(body.get("messages")),
        tools=_tools(body.get("tools")),
        call_tools=tool_choice != "none",
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        top_p=_number(body, "top_p", 1e-6, 1.0, 1.0),
        stop=_stop(body.get("stop")),
        seed=seed,
        logprobs=bool(body.get("logprobs", False)),
        episode_id=episode_id_of(body, header_episode),
        model=model,
    )


# ---------------------------------------------------------------------------------------------
# Messages -> chat-template messages (hermes layout), and their canonical form for comparison
# ---------------------------------------------------------------------------------------------


def hermes_format(request: ChatRequest, tokenizer: Any) -> HermesFormat:
    return HermesFormat(request.tools, tokenizer)


def template_message(message: dict[str, Any], fmt: HermesFormat) -> Message:
    """One normalised message as the chat template sees it."""
    if message["role"] == "tool":
        return tool_message(message["content"])
    if message["role"] == "assistant" and message["tool_calls"]:
        calls = [
            fmt.render_action(Action(kind="tool", name=name, arguments=arguments))
            for name, arguments in message["tool_calls"]
        ]
        return {"role": "assistant", "content": "\n".join([message["content"], *calls]).strip()}
    return {"role": message["role"], "content": message["content"]}


def prompt_messages(request: ChatRequest, fmt: HermesFormat) -> list[Message]:
    """The whole conversation for the chat template, the tool list in the system message."""
    rendered = [template_message(m, fmt) for m in request.messages]
    if request.tools:
        tools = hermes_tools_prompt(request.tools)
        if rendered[0]["role"] == "system":
            rendered[0] = {"role": "system", "content": f"{rendered[0]['content']}\n\n{tools}"}
        else:
            rendered.insert(0, {"role": "system", "content": tools})
    return rendered


def canonical(message: dict[str, Any]) -> tuple:
    """What must match between the history a client sends back and what was recorded: role,
    content up to surrounding whitespace, tool calls with their arguments as parsed JSON."""
    calls = tuple((n, json.dumps(a, sort_keys=True)) for n, a in message.get("tool_calls", []))
    return (message["role"], message["content"].strip(), calls)

"""Chat formats for tool-integrated reasoning: ReTool code blocks, validated multi-tool hermes
calls, and the SWE-RL think/solution turn. Same `ChatFormat` protocol as `formats/chat.py`.

- `ReToolFormat` (Feng et al. 2025, "ReTool"): the model writes reasoning and
  `<code>```python ... ```</code>`; generation stops at `</code>`, the code runs, and its output
  is inserted as `<interpreter>output</interpreter>` (loss mask 0) before the model continues.
  The final answer is `\\boxed{...}` (or `<answer>...</answer>`). `tool_name=None` gives the
  text-only variant (no code execution, same answer format) for tool vs. text-only comparisons.
- `MultiToolHermesFormat` (Qwen / hermes function calling, as in rStar2-Agent and ARTIST):
  `<tool_call>{"name", "arguments"}</tool_call>` checked against each tool's JSON schema
  (`tools.base.validate_arguments`); an unparsable or invalid call is an `invalid` Action whose
  `error` the env returns as the tool response, so the model reads it and can retry.
- `SweRLFormat` (Wei et al. 2025, "SWE-RL"): one turn `<think>...</think><solution>...</solution>`.

Per-turn tool-call limit. `Action` holds one call, and `types.py` stays as it is, so one call
per turn is run. When a turn holds several calls, `extra_calls` decides:
- "ignore" (default): the first call runs; the Action's `error` carries a note
  "Note: N more tool call(s) in this turn were ignored ..." (`error` is otherwise unused on a
  tool action). Envs append the note to the observation and count `ignored_tool_calls(action)`
  as the metric `ignored_tool_calls` (see `envs/math/interpreter.TIRToolEnv`). Arguments are not used
  for this: they go to the tool, whose schema may forbid extra keys.
- "invalid": the whole turn is an invalid action ("N tool calls in one turn; at most 1").
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from agentic_rl.formats.chat import HermesFormat
from agentic_rl.rewards.math import last_boxed
from agentic_rl.tools.base import Tool, validate_arguments
from agentic_rl.tools.sandbox.client import strip_code_fences
from agentic_rl.types import Action, Observation

ExtraCalls = Literal["ignore", "invalid"]
IGNORED_NOTE = (
    "Note: {n} more tool call(s) in this turn were ignored; only the first call is run. "
    "Make one call per turn."
)
_IGNORED = re.compile(r"^Note: (\d+) more tool call\(s\) in this turn were ignored")


def ignored_tool_calls(action: Action) -> int:
    """How many extra calls of this turn were ignored (0 unless the format noted some)."""
    match = _IGNORED.match(action.error) if action.kind == "tool" else None
    return int(match.group(1)) if match else 0


def _main_argument(tool: Tool) -> str:
    schema = tool.parameters or {}
    names = list(schema.get("required") or schema.get("properties", {}))
    if not names:
        raise ValueError(f"tool {tool.name!r} has no parameters: a code block needs one")
    return names[0]


class ReToolFormat:
    """`<code>` blocks run by the tool named `tool_name`; answers in `\\boxed{}` or `<answer>`.

    Parsing a turn, in order: the first complete `<code>...</code>` or `<answer>...</answer>`
    (whichever starts first) is the action, so a code block is run even when a guess was boxed
    before it; else the last `\\boxed{}` is the answer; else an unclosed `<code>` is invalid;
    else the turn had no action ("none" at end of sequence, "invalid" otherwise). The answer
    Action's `text` is the boxed content (or the `<answer>` body when it has no box).
    """

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        tool_name: str | None = "python",
        answer_tag: str = "answer",
        result_tag: str = "interpreter",
        extra_calls: ExtraCalls = "ignore",
    ) -> None:
        by_name = {t.name: t for t in tools}
        if tool_name is not None and tool_name not in by_name:
            raise ValueError(f"ReToolFormat needs the tool {tool_name!r}; got {list(by_name)}")
        self.tool_name = tool_name
        self.arg_name = _main_argument(by_name[tool_name]) if tool_name is not None else ""
        self.answer_tag = answer_tag
        self.result_tag = result_tag
        self.extra_calls = extra_calls
        self.stop = (["</code>"] if tool_name else []) + [f"</{answer_tag}>"]
        self._code = re.compile(r"<code>(.*?)</code>", re.DOTALL)
        self._answer = re.compile(rf"<{answer_tag}>(.*?)</{answer_tag}>", re.DOTALL)

    def parse(self, text: str, finish_reason: str) -> Action:
        answer = self._answer.search(text)
        codes = list(self._code.finditer(text)) if self.tool_name else []
        if answer and (not codes or answer.start() < codes[0].start()):
            body = answer.group(1)
            boxed = last_boxed(body)
            return Action(
                kind="answer", text=(boxed if boxed is not None else body).strip(), raw=text
            )
        if codes:
            return self._code_action(codes, text)
        boxed = last_boxed(text)
        if boxed is not None:
            return Action(kind="answer", text=boxed.strip(), raw=text)
        if self.tool_name and "<code>" in text:
            return Action(kind="invalid", error="<code> is never closed with </code>", raw=text)
        if f"<{self.answer_tag}>" in text:
            return Action(kind="invalid", error=f"<{self.answer_tag}> is never closed", raw=text)
        if finish_reason == "eos":
            return Action(kind="none", raw=text)
        return Action(kind="invalid", error="no code block and no \\boxed{} answer", raw=text)

    def _code_action(self, codes: list[re.Match[str]], text: str) -> Action:
        extra = len(codes) - 1
        if extra and self.extra_calls == "invalid":
            return Action(
                kind="invalid", error=f"{len(codes)} code blocks in one turn; at most 1", raw=text
            )
        code = strip_code_fences(codes[0].group(1).strip()).strip()
        if not code:
            return Action(kind="invalid", error="empty <code> block", raw=text)
        assert self.tool_name is not None
        return Action(
            kind="tool",
            name=self.tool_name,
            arguments={self.arg_name: code},
            error=IGNORED_NOTE.format(n=extra) if extra else "",
            raw=text,
        )

    def render_observation(self, observation: Observation) -> str:
        # Errors (invalid turns) use the same tag: the only one a ReTool model was taught.
        return f"\n<{self.result_tag}>\n{observation.content}\n</{self.result_tag}>\n"

    def render_action(self, action: Action) -> str:
        if action.kind == "answer":
            return action.text if "\\boxed" in action.text else f"\\boxed{{{action.text}}}"
        if action.kind == "tool" and action.name == self.tool_name:
            code = strip_code_fences(str(action.arguments[self.arg_name]).strip()).strip()
            return f"<code>\n```python\n{code}\n```\n</code>"
        raise ValueError(f"cannot render a {action.kind!r} action {action.name!r}")


class MultiToolHermesFormat(HermesFormat):
    """Hermes `<tool_call>` JSON with several tools, each call checked against its schema.

    Invalid calls (bad JSON, no name, unknown tool, arguments failing the schema) become
    `invalid` Actions whose `error` names the problem; `HermesFormat.render_observation` shows
    it to the model inside `<tool_response>`, as rStar2-Agent returns parse errors.
    """

    def __init__(
        self,
        tools: Sequence[Tool],
        tokenizer: Any,
        answer_tag: str = "answer",
        extra_calls: ExtraCalls = "ignore",
    ) -> None:
        super().__init__(tools, tokenizer, answer_tag)
        self.extra_calls = extra_calls

    def parse(self, text: str, finish_reason: str) -> Action:
        answer = self._answer.search(text)
        calls = list(self._call.finditer(text))
        if answer and (not calls or answer.start() < calls[0].start()):
            return Action(kind="answer", text=answer.group(1).strip(), raw=text)
        if not calls:
            return super().parse(text, finish_reason)  # unclosed call, no action
        if len(calls) > 1 and self.extra_calls == "invalid":
            return Action(
                kind="invalid", error=f"{len(calls)} tool calls in one turn; at most 1", raw=text
            )
        action = self.check_call(calls[0].group(1), text)
        if action.kind == "tool" and len(calls) > 1:
            action.error = IGNORED_NOTE.format(n=len(calls) - 1)
        return action

    def check_call(self, payload_text: str, raw: str) -> Action:
        """One `<tool_call>` body -> a tool Action, or an invalid one saying what is wrong."""
        try:
            payload = json.loads(payload_text)
        except json.JSONDecodeError as err:
            return Action(kind="invalid", error=f"tool call is not valid JSON ({err})", raw=raw)
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return Action(kind="invalid", error='tool call needs a "name" string', raw=raw)
        name = payload["name"]
        tool = self.tools.get(name)
        if tool is None:
            available = ", ".join(self.tools) or "none"
            return Action(
                kind="invalid", error=f"unknown tool '{name}'; available: {available}", raw=raw
            )
        arguments = payload.get("arguments", {})
        if isinstance(arguments, str):  # some models double-encode the arguments
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        problem = validate_arguments(tool, arguments)
        if problem is not None:
            return Action(
                kind="invalid", error=f"invalid arguments for tool '{name}': {problem}", raw=raw
            )
        return Action(kind="tool", name=name, arguments=arguments, raw=raw)


def hermes_tools_prompt(tools: Sequence[Tool]) -> str:
    """The tool list and call syntax for a system prompt, in the Qwen / hermes layout."""
    specs = "\n".join(
        json.dumps(
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
        )
        for t in tools
    )
    return (
        "You can call functions. Their signatures are inside <tools></tools>:\n"
        f"<tools>\n{specs}\n</tools>\n\n"
        "To call one, write a JSON object with its name and arguments inside "
        "<tool_call></tool_call>, one call per turn:\n"
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
        "The result comes back inside <tool_response></tool_response>."
    )


class SweRLFormat:
    """One turn `<think>...</think>` then `<solution>...</solution>` (SEARCH/REPLACE edits).

    Generation stops at `</solution>`; the answer Action's `text` is the solution body and its
    `raw` the whole turn, which the SWE-RL reward checks (exactly one of each tag). Rendering an
    answer whose text already holds `<solution>` keeps it verbatim (the scripted expert's turn).
    """

    def __init__(self) -> None:
        self.stop = ["</solution>"]
        self._solution = re.compile(r"<solution>(.*?)</solution>", re.DOTALL)

    def parse(self, text: str, finish_reason: str) -> Action:
        match = self._solution.search(text)
        if match:
            return Action(kind="answer", text=match.group(1).strip(), raw=text)
        if "<solution>" in text:
            return Action(kind="invalid", error="<solution> is never closed", raw=text)
        if finish_reason == "eos":
            return Action(kind="none", raw=text)
        return Action(kind="invalid", error="no <solution> in this turn", raw=text)

    def render_observation(self, observation: Observation) -> str:
        return f"\n\n<error>{observation.content}</error>\n\n"

    def render_action(self, action: Action) -> str:
        if action.kind != "answer":
            raise ValueError(f"cannot render a {action.kind!r} action")
        if "<solution>" in action.text:
            return action.text
        return f"<think>\nI found the bug.\n</think>\n<solution>\n{action.text}\n</solution>"

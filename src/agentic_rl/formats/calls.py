"""`CallListFormat`: function calling as BFCL's prompting models do it (`rollout.chat_format=
python_calls`).

The model's whole turn is its output: a Python list of calls, `[get_weather(city='Paris'),
get_time(tz='CET')]`, or anything else (text, `[]`), which calls nothing; the turn ends at the
model's end-of-turn token. There are no action tags, so every turn parses to an "answer" action
holding the turn's text (the tokenizer's special tokens removed); what the text means is the
env's to decide with the benchmark's own decoder (envs/benchmarks/bfcl.py). Observations come
back as the chat template's own turns: tool results as a `tool` message, the user's next
request (`Observation.name == "user"`) as a `user` message. The expert's answers are rendered
as their call list followed by the end-of-turn token, so a warm start teaches the model to stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_rl.formats.chat import template_suffix
from agentic_rl.types import Action, Observation

USER = "user"
"""`Observation.name` of an observation that is the user's next message, not a tool result."""


class CallListFormat:
    """BFCL-style prompting: the turn's text is the action; observations are chat turns."""

    def __init__(self, tools: Sequence[Any], tokenizer: Any) -> None:
        del tools  # the calls are written against the functions the env's prompt lists
        self.tokenizer = tokenizer
        self.stop: list[str] = []  # the turn ends at the end-of-turn token (or the budget)
        special = getattr(tokenizer, "all_special_tokens", None) or []
        self._special = sorted((t for t in special if t), key=len, reverse=True)
        self._end = getattr(tokenizer, "eos_token", None) or ""

    def parse(self, text: str, finish_reason: str) -> Action:
        """The turn's text without special tokens, as an answer (the env decodes it)."""
        clean = text
        for token in self._special:
            clean = clean.replace(token, "")
        return Action(kind="answer", text=clean.strip(), raw=text)

    def render_observation(self, observation: Observation) -> str:
        role = "user" if observation.name == USER else "tool"
        return template_suffix(self.tokenizer, [{"role": role, "content": observation.content}])

    def render_action(self, action: Action) -> str:
        if action.kind == "answer":
            return f"{action.text}{self._end}"
        raise ValueError(f"cannot render a {action.kind!r} action as a call list")

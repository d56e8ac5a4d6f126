"""Chat formats by name (`rollout.chat_format`): the one table that validation, the trainer and
the docs read. A format turns the env's tools into the system prompt, parses the model's turn
into an Action and renders observations (formats/chat.py has the protocol)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentic_rl.formats.calls import CallListFormat
from agentic_rl.formats.chat import ChatFormat, HermesFormat, TagFormat
from agentic_rl.formats.tir import MultiToolHermesFormat, ReToolFormat, SweRLFormat
from agentic_rl.model.vision import image_placeholder

# name -> (tools, tokenizer) -> format
CHAT_FORMATS: dict[str, Callable[[Sequence[Any], Any], ChatFormat]] = {
    "tags": lambda tools, tokenizer: TagFormat(
        tools, image_placeholder=image_placeholder(tokenizer)
    ),
    "hermes": lambda tools, tokenizer: HermesFormat(tools, tokenizer),
    "retool": lambda tools, tokenizer: ReToolFormat(tools),
    "retool_text": lambda tools, tokenizer: ReToolFormat((), tool_name=None),
    "hermes_multi": lambda tools, tokenizer: MultiToolHermesFormat(tools, tokenizer),
    "swe_rl": lambda tools, tokenizer: SweRLFormat(),
    "python_calls": lambda tools, tokenizer: CallListFormat(tools, tokenizer),
}


def make_chat_format(name: str, tools: Sequence[Any], tokenizer: Any) -> ChatFormat:
    """The chat format `name` (a key of CHAT_FORMATS) for an env with `tools`."""
    if name not in CHAT_FORMATS:
        raise ValueError(f"unknown chat format {name!r} (valid: {', '.join(CHAT_FORMATS)})")
    return CHAT_FORMATS[name](tools, tokenizer)

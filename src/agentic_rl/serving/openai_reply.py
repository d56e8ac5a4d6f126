"""A sampled completion -> the OpenAI assistant reply and the chat.completion JSON body."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from agentic_rl.formats.chat import HermesFormat
from agentic_rl.serving.openai_api import ChatRequest
from agentic_rl.types import Completion


@dataclass
class Reply:
    """The assistant message returned for one completion."""

    content: str
    tool_calls: list[tuple[str, Any]]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    invalid_tool_call: str = ""  # why a <tool_call> the model wrote could not be parsed

    def message(self) -> dict[str, Any]:
        return {"role": "assistant", "content": self.content, "tool_calls": self.tool_calls}


def build_reply(
    completion: Completion, request: ChatRequest, fmt: HermesFormat, tokenizer: Any
) -> Reply:
    """Decode the sampled ids into the client's view: the final end-of-sequence token dropped,
    text cut at the client's own stop string (OpenAI excludes it), a hermes tool call turned into
    `tool_calls`. Only the reply is derived from text; the recorded tokens stay as sampled."""
    ids = completion.token_ids
    if completion.finish_reason == "eos":
        ids = ids[:-1]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    if completion.finish_reason == "stop":
        cuts = [text.find(s) for s in request.stop if s in text]
        text = text[: min(cuts)] if cuts else text
    finish = "length" if completion.finish_reason == "length" else "stop"
    if not (request.tools and request.call_tools):
        return Reply(text, [], finish)
    action = fmt.parse(text, completion.finish_reason)
    if action.kind == "tool":
        content = text[: text.find("<tool_call>")].strip()
        return Reply(content, [(action.name, action.arguments)], "tool_calls")
    if action.kind == "invalid" and "<tool_call>" in text:
        return Reply(text, [], finish, invalid_tool_call=action.error)
    return Reply(text, [], finish)


def completion_body(
    reply: Reply,
    completion: Completion,
    tokenizer: Any,
    *,
    model: str,
    episode_id: str,
    prompt_tokens: int,
    policy_version: int,
    logprobs: bool,
) -> dict[str, Any]:
    """The chat.completion JSON (plus `episode_id`, the key for reporting the reward)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for name, arguments in reply.tool_calls
        ]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": reply.finish_reason,
        "logprobs": None,
    }
    if logprobs:
        pieces = [tokenizer.decode([i]) for i in completion.token_ids]
        choice["logprobs"] = {
            "content": [
                {"token": p, "logprob": lp, "bytes": list(p.encode()), "top_logprobs": []}
                for p, lp in zip(pieces, completion.logprobs, strict=True)
            ]
        }
    generated = len(completion.token_ids)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": f"policy-v{policy_version}",
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": generated,
            "total_tokens": prompt_tokens + generated,
        },
        "episode_id": episode_id,
    }

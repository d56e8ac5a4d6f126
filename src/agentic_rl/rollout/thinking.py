"""Qwen3 thinking modes: the `/think` and `/no_think` switches and a thinking token budget.

Qwen3 (Yang et al. 2025, "Qwen3 Technical Report"): one model both thinks and answers
directly. The user turns it with a flag at the end of a message (`/think`, `/no_think`; the
latest flag wins); in no-think mode the reply starts with an empty `<think>\\n\\n</think>\\n\\n`
block. Thinking-mode fusion SFT trains both kinds of reply, so the stage-3 data is built with
`fusion_response`. The thinking budget: once the thinking part reaches N tokens, generation is
halted, the text closing the thinking is inserted, and the model writes its answer from the
partial reasoning (an ability that emerges from the fusion stage, per the report).

How a rollout enforces the budget (`thinking_budget_continuation`), per model turn:
1. generate with `max_new_tokens = budget + (tokens before <think>, usually 1)` and the
   extra stop string `</think>`;
2. if the turn stopped on `</think>` (or never opened `<think>`), continue as usual;
3. if it stopped on length, call `thinking_budget_continuation(ids, tokenizer, budget)`: when
   it returns text, append `encode_text(tokenizer, text)` as inserted tokens (loss mask 0,
   the model did not sample them), then generate the answer with the turn's remaining budget;
   those tokens are sampled (loss mask 1) and belong to the same turn span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from agentic_rl.types import Message

ThinkingMode = Literal["think", "no_think"]
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
SWITCHES: dict[str, str] = {"think": "/think", "no_think": "/no_think"}
EMPTY_THINK = "<think>\n\n</think>\n\n"
FORCED_STOP = "\n</think>\n\n"
"""Inserted when the budget runs out: closes the thinking, opens the answer."""
QWEN3_FORCED_STOP = (
    "\n\nConsidering the limited time by the user, I have to give the solution based on the "
    "thinking directly now.\n</think>\n\n"
)
"""The Qwen3 report's longer stop-thinking instruction, as an alternative `stop_text`."""


def apply_thinking_switch(messages: Sequence[Message], mode: ThinkingMode | None) -> list[Message]:
    """A copy of `messages` with " /think" or " /no_think" appended to the last user message.

    `mode=None` returns an unchanged copy. Raises ValueError if there is no user message.
    """
    out = [dict(m) for m in messages]
    if mode is None:
        return out
    if mode not in SWITCHES:
        raise ValueError(f"thinking mode must be think or no_think, got {mode!r}")
    for message in reversed(out):
        if message.get("role") == "user":
            message["content"] = f"{message['content'].rstrip()} {SWITCHES[mode]}"
            return out
    raise ValueError("no user message to put the thinking switch on")


def fusion_response(answer: str, thinking: str | None, mode: ThinkingMode) -> str:
    """A thinking-mode fusion SFT target: `<think>\\n{thinking}\\n</think>\\n\\n{answer}` in
    think mode, the empty block then the answer in no-think mode."""
    if mode == "no_think":
        return EMPTY_THINK + answer
    if not thinking:
        raise ValueError("think-mode targets need a non-empty thinking text")
    return f"{THINK_OPEN}\n{thinking.strip()}\n{THINK_CLOSE}\n\n{answer}"


def _think_start(token_ids: Sequence[int], tokenizer: Any) -> int | None:
    """Smallest k with `<think>` in decode(ids[:k]) (binary search: the predicate is monotone
    in k), or None. Works whether `<think>` is one special token or several pieces."""
    ids = list(token_ids)
    if THINK_OPEN not in tokenizer.decode(ids):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if THINK_OPEN in tokenizer.decode(ids[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


def thinking_length(token_ids: Sequence[int], tokenizer: Any) -> int | None:
    """Tokens generated inside a still-open thinking block, or None when no block is open
    (never opened, or already closed)."""
    text = tokenizer.decode(list(token_ids))
    if THINK_OPEN not in text or THINK_CLOSE in text[text.index(THINK_OPEN) :]:
        return None
    start = _think_start(token_ids, tokenizer)
    return None if start is None else len(token_ids) - start


def thinking_budget_continuation(
    token_ids: Sequence[int], tokenizer: Any, budget: int, stop_text: str = FORCED_STOP
) -> str | None:
    """The text to insert when the open thinking block has reached `budget` tokens, else None.

    `token_ids`: the tokens generated so far in this turn. Example: with budget 3 and a turn
    `<think>`, a, b, c (one token each) the block holds 3 tokens -> FORCED_STOP; after
    `</think>` or with 2 tokens -> None.
    """
    if budget < 0:
        raise ValueError(f"thinking budget must be >= 0, got {budget}")
    length = thinking_length(token_ids, tokenizer)
    return stop_text if length is not None and length >= budget else None

"""Tokenizing what the framework inserts: prompts through the chat template, observation and
expert text on its own (never the model's text: trajectories keep the sampled ids), and the check
that a chat template is prefix-preserving, without which turn-by-turn contexts would differ from
the template's rendering of the same conversation."""

from __future__ import annotations

from typing import Any

from agentic_rl.errors import UserInputError
from agentic_rl.types import Message


class TokenizerCheckError(UserInputError, RuntimeError):
    """The tokenizer / chat template cannot be used for token-native multi-turn rollouts."""


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of framework-inserted text (observations, expert turns); special-token strings
    such as `<|im_end|>` map to their single special ids."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def encode_prompt(tokenizer: Any, messages: list[Message]) -> list[int]:
    """The opening messages rendered by the chat template, ready for the first assistant turn."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def check_prefix_preserving(tokenizer: Any) -> None:
    """Fail loudly if multi-turn token contexts built turn by turn would differ from the template.

    Checks (1) the rendered conversation with k messages is a prefix of the one with k + 1 (in
    tokens, not just text), and (2) special tokens in inserted text encode to their single ids.
    Templates that rewrite earlier turns (e.g. strip reasoning from past assistant messages) fail.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        raise TokenizerCheckError("tokenizer has no chat template")
    convo: list[Message] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Question one?"},
        {"role": "assistant", "content": "<search>one</search>"},
        {"role": "tool", "content": "<tool_response>result</tool_response>"},
        {"role": "assistant", "content": "<answer>yes</answer>"},
    ]
    previous: list[int] = []
    for k in range(1, len(convo) + 1):
        ids = tokenizer.apply_chat_template(convo[:k], tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        if ids[: len(previous)] != previous:
            raise TokenizerCheckError(
                f"chat template is not prefix-preserving: adding message {k} "
                f"({convo[k - 1]['role']}) changes the tokens of the earlier ones; multi-turn "
                "rollouts would train on tokens the model never saw"
            )
        previous = ids
    for token in (tokenizer.eos_token, tokenizer.bos_token):
        if token and len(encode_text(tokenizer, token)) != 1:
            raise TokenizerCheckError(
                f"special token {token!r} does not encode to a single id inside inserted text"
            )

"""Qwen3 thinking switches, fusion targets and the thinking token budget."""

from __future__ import annotations

import pytest

from agentic_rl.rollout.thinking import (
    EMPTY_THINK,
    FORCED_STOP,
    apply_thinking_switch,
    fusion_response,
    thinking_budget_continuation,
    thinking_length,
)


class PieceTokenizer:
    """Token id i decodes to PIECES[i]."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] for i in ids)


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2? "}]


def test_apply_thinking_switch():
    out = apply_thinking_switch(MESSAGES, "no_think")
    assert out[-1]["content"] == "2+2? /no_think" and MESSAGES[-1]["content"] == "2+2? "
    assert apply_thinking_switch(MESSAGES, "think")[-1]["content"] == "2+2? /think"
    assert apply_thinking_switch(MESSAGES, None) == MESSAGES
    with pytest.raises(ValueError):
        apply_thinking_switch([{"role": "system", "content": "x"}], "think")


@pytest.mark.parametrize("split_tag", [False, True])
def test_budget_counts_tokens_after_think(split_tag):
    pieces = ["<", "think", ">"] if split_tag else ["<think>"]
    vocab = [*pieces, "a", "b", "c", "</think>", "x"]
    tok = PieceTokenizer(vocab)
    opening = list(range(len(pieces)))
    a, b, c, close = (vocab.index(p) for p in ("a", "b", "c", "</think>"))
    assert thinking_length([*opening, a, b], tok) == 2
    assert thinking_budget_continuation([*opening, a, b], tok, budget=3) is None
    assert thinking_budget_continuation([*opening, a, b, c], tok, budget=3) == FORCED_STOP
    assert thinking_budget_continuation([*opening, a, b, c, a], tok, budget=3) == FORCED_STOP
    assert thinking_length([*opening, a, close, b], tok) is None  # closed: nothing to force
    assert thinking_length([a, b, c], tok) is None  # never opened
    x = vocab.index("x")
    assert thinking_length([x, *opening, a], tok) == 1  # text before <think> does not count
    assert thinking_budget_continuation([*opening], tok, budget=0) == FORCED_STOP


def test_budget_with_the_bundled_tokenizer(tokenizer):
    ids = list(
        tokenizer("<think>\nLet me think about this carefully", add_special_tokens=False)[
            "input_ids"
        ]
    )
    inside = len(ids) - thinking_length(ids, tokenizer)
    assert tokenizer.decode(ids[:inside]).endswith("<think>")
    assert thinking_budget_continuation(ids, tokenizer, budget=len(ids) - inside) == FORCED_STOP
    assert thinking_budget_continuation(ids, tokenizer, budget=len(ids)) is None


def test_fusion_response():
    assert fusion_response("42", None, "no_think") == EMPTY_THINK + "42"
    assert fusion_response("42", "plan", "think") == "<think>\nplan\n</think>\n\n42"
    with pytest.raises(ValueError):
        fusion_response("42", "", "think")

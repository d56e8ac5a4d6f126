"""Question-answering rewards: SQuAD/Search-R1 normalisation, exact match, cover EM, token F1.

`exact_match_reward` has TRL's reward-function shape (`fn(completions, **columns)`), so it works
with this project's trainer and with TRL's GRPOTrainer alike.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse whitespace (SQuAD)."""
    text = text.lower().translate(_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(golds: str | Sequence[str]) -> list[str]:
    return [golds] if isinstance(golds, str) else list(golds)


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(gold) for gold in _as_list(golds)))


def cover_exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 if any non-empty normalised gold is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return float(
        any((gold_norm := normalize_answer(gold)) and gold_norm in pred for gold in _as_list(golds))
    )


def _token_f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        # Two empty answers agree; one empty answer shares nothing.
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golds: str | Sequence[str]) -> float:
    """Token-level F1 between prediction and gold (max over the gold answers)."""
    return max((_token_f1(prediction, gold) for gold in _as_list(golds)), default=0.0)


def extract_answer(completion: str) -> str | None:
    """The content of the last `<answer>...</answer>` in the text (stripped), or None."""
    matches = _ANSWER.findall(completion)
    return matches[-1].strip() if matches else None


def _completion_text(completion: Any) -> str:
    # TRL passes plain strings, or for chat data a list of messages: read the assistant turns.
    if isinstance(completion, str):
        return completion
    return "".join(
        message.get("content", "")
        for message in completion
        if message.get("role", "assistant") == "assistant"
    )


def exact_match_reward(
    completions: Sequence[Any], answers: Sequence[str | Sequence[str]], **kwargs: Any
) -> list[float]:
    """TRL-shaped reward: exact match of each completion's last <answer> against its golds.

    A completion without an <answer> tag scores 0.0. `kwargs` takes the other dataset columns.
    """
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answer lists")
    rewards = []
    for completion, golds in zip(completions, answers, strict=True):
        answer = extract_answer(_completion_text(completion))
        rewards.append(0.0 if answer is None else exact_match(answer, golds))
    return rewards

"""Math rewards: answer extraction, equivalence checking, DAPO / R1-style outcome rewards.

`math_reward` has TRL's reward-function shape. Equivalence is decided in two steps:
1. an exact, in-process fast path: normalise LaTeX noise (`$`, `\\left`, `\\text{}`, degrees,
   percent, thousands separators) and compare numbers as exact fractions, so "\\frac{1}{2}" vs
   "0.5" and "1,000" vs "1000" never touch sympy;
2. anything symbolic goes to a verifier *subprocess* (math-verify where installed, else sympy
   with a small LaTeX converter). sympy can hang for good on inputs like 9^{9^{9^9}}, and a hung
   thread cannot be stopped, so the subprocess is killed at the timeout (the comparison counts
   as wrong) and a fresh one starts on the next call. A lock makes it thread-safe. The
   subprocess half lives in `rewards/_math_verify.py`; callers import its names from there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from agentic_rl.rewards._math_verify import (
    Verifier,
    braced_content,
    get_verifier,
    latex_to_sympy_text,
    serve_verifier,
)

SCORES = {"pm1": (1.0, -1.0), "binary": (1.0, 0.0)}
"""Reward for (correct, wrong or missing): DAPO's +1/-1, or R1/rStar2's 1/0."""
DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 1000  # longer "answers" are rambling, not answers; never sent to sympy

# -- extraction -------------------------------------------------------------------------------

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_LINE = re.compile(r"(?i)(?:final\s+)?answer\s*(?:is\s*)?[:：]\s*([^\n]+)")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed `\\boxed{...}` (nested braces kept, `\\boxed{\\boxed{x}}`
    unwrapped); `\\boxed 5` without braces is accepted too."""
    for match in reversed(list(_BOXED.finditer(text))):
        end = match.end()
        if end < len(text) and text[end] == "{":
            content = braced_content(text, end)
        else:
            content = re.match(r"[^\s$]*", text[end:]).group(0) or None
        if content is not None:
            inner = last_boxed(content)
            return inner if inner is not None and _BOXED.match(content.strip()) else content
    return None


def extract_math_answer(text: str) -> str | None:
    """The final answer in a completion, or None.

    Order: the last `<answer>...</answer>` (and a `\\boxed{}` inside it), else the last
    `\\boxed{}`, else the last "Answer: ..." line.
    """
    tags = _ANSWER_TAG.findall(text)
    if tags:
        inside = tags[-1]
        answer = last_boxed(inside)
        return (answer if answer is not None else inside).strip()
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    lines = _ANSWER_LINE.findall(text)
    if lines:
        return re.sub(r"^[\s*$]+|[\s*$.]+$", "", lines[-1])  # markdown bold, "$", full stop
    return None


# -- normalisation and the exact numeric fast path ------------------------------------------

_NOISE = [
    (re.compile(r"\\(?:left|right|displaystyle)\b|\\[!,;:]|\\ |~"), ""),
    (re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\\[dt]frac"), r"\\frac"),
    (re.compile(r"\^\s*\{?\\circ\}?|°|\\%|%|\\\$"), ""),
    (re.compile(r"\{,\}"), ","),  # 1{,}000
]
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_INT = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d{1,3})?")
_SLASH = re.compile(r"([+-]?\d+)/([+-]?\d+)")
_FRAC = re.compile(r"([+-]?)\\frac(?:\{([^{}]+)\}\{([^{}]+)\}|(\d)(\d))")


def normalize_math(text: str) -> str:
    """Strip LaTeX noise that never changes a value; keep everything else."""
    text = text.strip().strip("$").strip()
    for pattern in ("\\(", "\\)", "\\[", "\\]"):
        text = text.replace(pattern, "")
    for pattern, repl in _NOISE:
        text = pattern.sub(repl, text)
    text = re.sub(r"^[a-zA-Z]\s*=\s*(?=\S)(?!.*=)", "", text.strip())  # "x = 5" -> "5"
    text = text.strip().rstrip(".").strip()
    if _THOUSANDS.fullmatch(text.replace(" ", "")):
        text = text.replace(",", "")
    return text


def _plain_number(text: str) -> Fraction | None:
    text = text.replace(" ", "")
    if len(text) > 400:  # int() refuses > 4300 digits anyway; answers are never that long
        return None
    if _INT.fullmatch(text) or _DECIMAL.fullmatch(text):
        return Fraction(text)
    match = _SLASH.fullmatch(text)
    if match and int(match.group(2)) != 0:
        return Fraction(int(match.group(1)), int(match.group(2)))
    return None


def parse_number(text: str) -> Fraction | None:
    """An exact value for integers, decimals, a/b and \\frac{a}{b} (after `normalize_math`)."""
    value = _plain_number(text)
    if value is not None:
        return value
    match = _FRAC.fullmatch(text.replace(" ", ""))
    if match is None:
        return None
    sign, num, den = (
        match.group(1),
        match.group(2) or match.group(4),
        match.group(3) or match.group(5),
    )
    num_value, den_value = _plain_number(num), _plain_number(den)
    if num_value is None or not den_value:
        return None
    value = num_value / den_value
    return -value if sign == "-" else value


def _numbers_equal(a: Fraction, b: Fraction, a_text: str, b_text: str) -> bool:
    if a == b:
        return True
    # A rounded decimal ("0.333333") may stand for an exact value (1/3): 1e-6 relative slack.
    rounded = "." in a_text or "." in b_text
    return rounded and abs(a - b) <= Fraction(1, 10**6) * max(1, abs(b))


def math_equal(
    pred: str | None, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S, backend: str = "auto"
) -> bool:
    """Whether `pred` and `gold` denote the same answer. Never raises; a timeout is False."""
    if pred is None or not pred.strip() or len(pred) > MAX_ANSWER_CHARS:
        return False
    p, g = normalize_math(pred), normalize_math(gold)
    if p.replace(" ", "") == g.replace(" ", ""):
        return True
    p_num, g_num = parse_number(p), parse_number(g)
    if p_num is not None and g_num is not None:
        return _numbers_equal(p_num, g_num, p, g)
    return bool(get_verifier(backend).check(p, g, timeout_s))


# -- rewards ----------------------------------------------------------------------------------


def _completion_text(completion: Any) -> str:
    # TRL passes plain strings, or for chat data a list of messages: read the assistant turns.
    if isinstance(completion, str):
        return completion
    return "".join(
        m.get("content", "") for m in completion if m.get("role", "assistant") == "assistant"
    )


def gold_answer(gold: str) -> str:
    """A gold column may hold a full solution: use its last \\boxed{} when there is one."""
    boxed = last_boxed(gold)
    return boxed.strip() if boxed is not None else gold.strip()


def math_score(
    completion: Any,
    golds: str | float | Sequence[str | float],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> float:
    """1.0 if the completion's extracted answer equals any gold answer, else 0.0."""
    answer = extract_math_answer(_completion_text(completion))
    # Datasets store golds as text, numbers, or lists of either.
    gold_list = [golds] if isinstance(golds, str | int | float) else list(golds)
    return float(
        answer is not None
        and any(math_equal(answer, gold_answer(str(g)), timeout_s) for g in gold_list)
    )


def math_reward(
    completions: Sequence[Any],
    answers: Sequence[str | Sequence[str]] | None = None,
    *,
    score: str = "binary",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **kwargs: Any,
) -> list[float]:
    """TRL-shaped outcome reward: `score="pm1"` gives DAPO's +1 / -1, `"binary"` gives 1 / 0.

    A completion without an extractable answer gets the wrong-answer value. The golds come from
    `answers`, else from an `answer` or `solution` dataset column (TRL passes columns by name).
    """
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; valid: {', '.join(SCORES)}")
    if answers is None:
        answers = kwargs.get("answer", kwargs.get("solution"))
        if answers is None:
            raise ValueError("math_reward needs `answers` (or an `answer` / `solution` column)")
    if len(completions) != len(answers):
        raise ValueError(f"{len(completions)} completions but {len(answers)} answers")
    right, wrong = SCORES[score]
    return [
        right if math_score(c, g, timeout_s) else wrong
        for c, g in zip(completions, answers, strict=True)
    ]


__all__ = [
    "SCORES",
    "Verifier",
    "extract_math_answer",
    "get_verifier",
    "gold_answer",
    "last_boxed",
    "latex_to_sympy_text",
    "math_equal",
    "math_reward",
    "math_score",
    "normalize_math",
    "parse_number",
    "serve_verifier",
]

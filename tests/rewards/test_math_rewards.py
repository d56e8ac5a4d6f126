"""Math answer extraction, equivalence and rewards against hand-computed values."""

from __future__ import annotations

import threading
import time
from fractions import Fraction

import pytest

from agentic_rl.rewards._math_verify import get_verifier, latex_to_sympy_text
from agentic_rl.rewards.math import (
    extract_math_answer,
    last_boxed,
    math_equal,
    math_reward,
    math_score,
    normalize_math,
    parse_number,
)

# Both verifier backends where math-verify is installed; sympy alone otherwise.
BACKENDS = ["sympy", "auto"]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so the answer is \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),  # last, nested
        ("\\boxed{\\boxed{7}}", "7"),  # a box in a box
        ("\\boxed{{a}+{b}}", "{a}+{b}"),
        ("\\fbox{3}", "3"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{2} and a truncated \\boxed{\\frac{1}{", "2"),  # unbalanced: the last good one
        ("<answer>12</answer>", "12"),
        ("<answer>1</answer> <answer>The value is \\boxed{3}</answer>", "3"),
        ("Work...\nAnswer: **7**.", "7"),
        ("The final answer is: $12$", "12"),
        ("no answer here", None),
        ("", None),
    ],
)
def test_extract_math_answer(text, answer):
    assert extract_math_answer(text) == answer


def test_last_boxed_without_box():
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("$1,000$", "1000"),
        ("1{,}000", "1000"),
        ("\\left( 3 \\right)", "( 3 )"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("90^\\circ", "90"),
        ("50\\%", "50"),
        ("x = 5", "5"),
        ("5 \\text{cm}", "5 cm"),
        ("1,2", "1,2"),  # a pair, not one thousand two hundred
        ("7.", "7"),
    ],
)
def test_normalize_math(text, normalized):
    assert normalize_math(text) == normalized


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", Fraction(3)),
        ("-0.25", Fraction(-1, 4)),
        ("1e3", None),  # no point, no digits before e: not a plain decimal
        ("2.5e1", Fraction(25)),
        ("3/4", Fraction(3, 4)),
        ("\\frac{1}{2}", Fraction(1, 2)),
        ("-\\frac{3}{4}", Fraction(-3, 4)),
        ("\\frac12", Fraction(1, 2)),
        ("\\frac{1}{0}", None),
        ("1/0", None),
        ("\\frac{x}{2}", None),
        ("9" * 500, None),  # absurdly long: not parsed
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("pred", "gold", "equal"),
    [
        ("\\frac{1}{2}", "0.5", True),  # the fast path: exact fractions
        ("1,000", "1000", True),
        ("0.333333", "\\frac{1}{3}", True),  # a rounded decimal, 1e-6 slack
        ("0.33", "\\frac{1}{3}", False),
        ("3", "4", False),
        ("x = 5", "5", True),
        ("", "5", False),
        (None, "5", False),
    ],
)
def test_math_equal_fast_path(pred, gold, equal):
    assert math_equal(pred, gold) is equal


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("pred", "gold", "equal"),
    [
        ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True),
        ("(x+1)^2", "x^2+2x+1", True),
        ("2\\pi", "\\pi \\cdot 2", True),
        ("\\sqrt[3]{8}", "2", True),
        ("\\sqrt{2}", "1.5", False),
        ("x+1", "x+2", False),
    ],
)
def test_math_equal_symbolic(pred, gold, equal, backend):
    assert math_equal(pred, gold, timeout_s=30, backend=backend) is equal


def test_latex_to_sympy_text_and_refusals():
    assert latex_to_sympy_text("\\frac{1}{\\sqrt{2}}") == "((1)/(((2)**(1/(2)))))"
    assert latex_to_sympy_text("\\unknown{1}") is None
    assert latex_to_sympy_text("\\frac{1}") is None
    # Anything that could smuggle Python through sympy's eval is refused, not evaluated.
    for attack in ["exec(chr(49))", "().__class__", "open(1)", "x.real"]:
        assert math_equal(attack, "1", timeout_s=10, backend="sympy") is False


@pytest.mark.parametrize("backend", BACKENDS)
def test_pathological_expression_times_out_gracefully(backend):
    verifier = get_verifier(backend)
    math_equal("1+1", "x", timeout_s=30, backend=backend)  # the verifier is up and warm
    timeouts = verifier.timeouts
    start = time.monotonic()
    assert math_equal("9^{9^{9^{9}}}", "3", timeout_s=1.0, backend=backend) is False
    assert time.monotonic() - start < 5
    assert verifier.timeouts == timeouts + 1
    # The hung subprocess was killed; the next symbolic check gets a fresh one.
    assert math_equal("\\sqrt{4}", "2", timeout_s=30, backend=backend) is True


def test_verifier_is_thread_safe():
    results = []

    def check(i: int) -> None:
        results.append(math_equal(f"\\sqrt{{{i * i}}}", str(i), timeout_s=30, backend="sympy"))

    threads = [threading.Thread(target=check, args=(i,)) for i in range(2, 8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 6


def test_math_reward_scores():
    completions = [
        "We get \\boxed{\\frac{1}{2}}",  # right
        "Answer: 1,000",  # right
        "<answer>\\boxed{\\boxed{3}}</answer>",  # right, nested boxes
        "I think it is \\boxed{5}",  # wrong
        "no final answer at all",  # missing
    ]
    answers = ["0.5", "1000", "3", "6", "1"]
    assert math_reward(completions, answers, score="pm1") == [1.0, 1.0, 1.0, -1.0, -1.0]
    assert math_reward(completions, answers, score="binary") == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert math_reward(completions, answers) == [1.0, 1.0, 1.0, 0.0, 0.0]  # binary by default


def test_math_reward_trl_shape():
    # TRL passes prompts and dataset columns by name; chat completions are message lists.
    completions = [[{"role": "assistant", "content": "\\boxed{4}"}], "\\boxed{7}"]
    solutions = ["2 + 2 = \\boxed{4}", "so \\boxed{8}"]  # golds inside full solutions
    rewards = math_reward(completions, prompts=["p1", "p2"], solution=solutions, score="pm1")
    assert rewards == [1.0, -1.0]
    assert math_reward(["\\boxed{4}"], answer=[4]) == [1.0]  # numeric gold column
    assert math_reward(["\\boxed{4}"], [["3", "4"]]) == [1.0]  # any of several golds
    with pytest.raises(ValueError, match="unknown score"):
        math_reward(["x"], ["1"], score="ternary")
    with pytest.raises(ValueError, match="answers"):
        math_reward(["x"])
    with pytest.raises(ValueError, match="completions"):
        math_reward(["x", "y"], ["1"])


def test_math_score():
    assert math_score("\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert math_score("\\boxed{2}", ["1", "3"]) == 0.0

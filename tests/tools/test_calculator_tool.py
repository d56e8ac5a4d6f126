"""The safe calculator: arithmetic, number formatting and hostile inputs."""

import time

import pytest

from agentic_rl.tools.base import ToolError, call_tool, result_tag_of
from agentic_rl.tools.calculator import Calculator, evaluate, format_number

calc = Calculator()


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("37 * 48 + 129", "1905"),
        ("(12 + 18 + 25) * 31", "1705"),
        ("924 / 33 + 47", "75"),  # integral float prints as an int
        ("7 / 2", "3.5"),
        ("1 / 3", "0.333333"),
        ("2 / 3", "0.666667"),
        ("0.1 + 0.2", "0.3"),
        ("17 // 5", "3"),
        ("17 % 5", "2"),
        ("2 ** 10", "1024"),
        ("10 ** -2", "0.01"),
        ("-(3 - 5) * 4", "8"),
        ("+7 - -3", "10"),
        ("10 - 12", "-2"),
        ("1.5 * 4", "6"),
        ("3 × 4 ÷ 2", "6"),
        ("2^3", "8"),
        ("  5  ", "5"),
        ("123456789 * 987654321", "121932631112635269"),  # integers stay exact
    ],
)
def test_arithmetic(expression, expected):
    assert calc(expression=expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "function calls and attributes are not allowed"),
        ("().__class__", "function calls and attributes are not allowed"),
        ("a+1", "unknown name 'a'"),
        ("9**9**9", "exponent 387420489 is too large"),
        ("(2**100)**100", "result is too large"),
        ("(2**60)**60 * (2**60)**60", "result is too large"),  # product check
        ("1e308 * 10", "result is not a finite number"),
        ("1.5 ** 99 ** 2", "exponent 9801 is too large"),
        ("1 / 0", "division by zero"),
        ("5 // 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("(-8) ** 0.5", "result is not a real number"),
        ("'abc'", "unsupported constant 'abc'"),
        ("True + 1", "unsupported constant True"),
        ("[1, 2]", "unsupported syntax (List)"),
        ("lambda: 1", "unsupported syntax (Lambda)"),
        ("1 if 1 else 2", "unsupported syntax (IfExp)"),
        ("1 << 5", "operator LShift is not allowed"),
        ("~5", "operator Invert is not allowed"),
        ("1 +", "invalid expression"),
        ("", "empty expression"),
        ("1+" * 150 + "1", "expression is longer than 200 characters"),
    ],
)
def test_refuses_hostile_or_bad_input(expression, message):
    start = time.perf_counter()
    with pytest.raises(ToolError) as caught:
        evaluate(expression)
    assert message in str(caught.value)
    assert time.perf_counter() - start < 0.5


def test_hostile_input_through_call_tool_is_an_observation():
    outcome = call_tool(calc, {"expression": "__import__('os').system('echo hi')"}, timeout_s=2.0)
    assert not outcome.ok
    assert outcome.text == "Error: function calls and attributes are not allowed; only arithmetic"
    assert call_tool(calc, {"expression": "6 * 7"}, timeout_s=2.0).text == "42"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (12, "12"),
        (12.0, "12"),
        (-0.0, "0"),
        (2.5, "2.5"),
        (1e-7, "1e-07"),
        (3.14159265, "3.141593"),
    ],
)
def test_format_number(value, text):
    assert format_number(value) == text


def test_tool_definition():
    assert calc.name == "calc"
    assert result_tag_of(calc) == "result"
    assert calc.parameters["required"] == ["expression"]
    assert calc.parameters["properties"]["expression"]["type"] == "string"

"""A safe arithmetic calculator tool.

Expressions are parsed with `ast` and evaluated node by node over a whitelist (numbers, + - * /
// % **, unary signs, parentheses); names, calls, attributes and everything else are refused, so
model-written text can never execute code. Powers and integer sizes are bounded so that
`9**9**9` fails fast instead of eating the CPU.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.tools.base import ToolError

Number = int | float

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100
MAX_INT_BITS = 4096  # ~1233 decimal digits; far beyond any word problem, cheap to compute

_BINARY_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
# Symbols small models write for arithmetic; mapped before parsing.
_REPLACEMENTS = {"\u00d7": "*", "\u00f7": "/", "\u2212": "-", "^": "**"}  # × ÷ −


def _check_size(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError("result is too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result is not a finite number")
    return value


def _power(base: Number, exponent: Number) -> Number:
    # Bound before computing: 2**10**6 would take seconds and megabytes.
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent {exponent} is too large (limit {MAX_EXPONENT})")
    both_int = isinstance(base, int) and isinstance(exponent, int)
    if both_int and exponent > 0 and base.bit_length() * exponent > MAX_INT_BITS:
        raise ToolError("result is too large")
    if base == 0 and exponent < 0:
        raise ToolError("division by zero")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("result is not a real number")
    return result


def _eval_node(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ToolError(f"unsupported constant {value!r}; only numbers are allowed")
        return value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_eval_node(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ToolError("division by zero")
        try:
            return _check_size(_BINARY_OPS[type(node.op)](left, right))
        except OverflowError as exc:
            raise ToolError("result is too large") from exc
    if isinstance(node, ast.BinOp | ast.UnaryOp):
        raise ToolError(f"operator {type(node.op).__name__} is not allowed; use + - * / // % **")
    if isinstance(node, ast.Name):
        raise ToolError(f"unknown name '{node.id}'; only numbers and + - * / // % ** ( )")
    if isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        raise ToolError("function calls and attributes are not allowed; only arithmetic")
    raise ToolError(f"unsupported syntax ({type(node).__name__}); only numbers and + - * / // % **")


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression safely. Raises ToolError with a readable message."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    for symbol, replacement in _REPLACEMENTS.items():
        expression = expression.replace(symbol, replacement)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"invalid expression: {exc.msg}") from exc
    try:
        return _eval_node(tree)
    except OverflowError as exc:
        raise ToolError("result is too large") from exc
    except RecursionError as exc:
        raise ToolError("expression is nested too deeply") from exc


def format_number(value: Number) -> str:
    """Print integers (and integral floats) as integers; round other floats to 6 decimals."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    if 1e-4 <= abs(value) < 1e15:
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return f"{value:.6g}"  # very small or very large: keep 6 significant digits


@dataclass
class Calculator:
    """Tool "calc": evaluates one arithmetic expression and returns the number as text."""

    name: str = "calc"
    description: str = (
        "Evaluate an arithmetic expression with numbers, + - * / // % ** and parentheses."
    )
    parameters: dict[str, Any] = field(
        default_factory=lambda: {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": "The arithmetic expression, e.g. 37 * 48 + 129",
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        }
    )
    result_tag: str = "result"

    def __call__(self, expression: str) -> str:
        return format_number(evaluate(expression))

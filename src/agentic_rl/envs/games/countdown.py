"""Countdown (TinyZero, RAGEN): reach the target with the given numbers, each used once.

"Target: 24, nums: [2, 3, 4]": the agent answers an arithmetic expression that uses every
number exactly once, `<answer>2 * 3 * 4</answer>`. Reward as RAGEN's (TinyZero's
`compute_score`): 1 when the expression uses exactly the given numbers (as a multiset) and
equals the target; 0.1 when it uses exactly the given numbers but misses the target (or divides
by zero); 0 otherwise (wrong numbers, not an expression, no answer).

The verifier is exact and never runs the model's text: the answer is parsed with `ast` into
a tree that may only hold non-negative integer literals, `+ - * /`, unary minus and
parentheses (anything else is "not an expression"), and is evaluated in exact rational
arithmetic (`fractions.Fraction`), so 7 / 2 * 2 is exactly 7 and no float tolerance is needed.
`x`, `×` and `÷` are read as `*` and `/`, and a trailing "= 24" is ignored.

Tasks are generated solvable by construction: 3 or 4 numbers from 1 to `max_number`, combined in
a random order by random operations whose intermediate results stay positive integers; the
result (between 1 and `max_target`) is the target and the construction the gold answer. The
scripted expert answers with it (or, for tasks without one, with `solve`'s exhaustive search).
"""

from __future__ import annotations

import ast
import random
import re
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from typing import Literal

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.splits import split_of
from agentic_rl.types import Task

Split = Literal["train", "eval"]

MAX_ANSWER_CHARS = 200
CORRECT, WELL_FORMED = 1.0, 0.1
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_EQUALS = re.compile(r"=.*$", re.DOTALL)

SYSTEM_PROMPT = (
    "You are solving the Countdown puzzle. Use the numbers to write an arithmetic expression "
    "that equals the target, with +, -, *, / and parentheses, using each number exactly once. "
    "Write only the expression in the answer, like <answer>(6 - 2) * 5</answer>."
)


class ExpressionError(ValueError):
    """The answer is not an allowed arithmetic expression; the message says why."""


def parse_expression(text: str) -> ast.expr:
    """The expression tree of `text`, allowing only integer literals, + - * /, unary minus and
    parentheses. Raises ExpressionError otherwise (nothing is ever evaluated by Python)."""
    text = text.strip().replace("×", "*").replace("÷", "/").replace("x", "*").replace("X", "*")
    text = _EQUALS.sub("", text).strip()
    if not text:
        raise ExpressionError("empty expression")
    if len(text) > MAX_ANSWER_CHARS:
        raise ExpressionError(f"longer than {MAX_ANSWER_CHARS} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        raise ExpressionError(f"not an arithmetic expression ({type(err).__name__})") from None
    _check(tree.body)
    return tree.body


def _check(node: ast.AST) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        _check(node.left)
        _check(node.right)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check(node.operand)
    elif isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
        pass
    else:
        raise ExpressionError(f"{type(node).__name__} is not allowed (only integers and + - * /)")


def numbers_of(node: ast.expr) -> list[int]:
    """The integer literals of an expression tree, left to right."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)]


def evaluate(node: ast.expr) -> Fraction:
    """The exact value of a checked expression tree; ZeroDivisionError on a division by 0."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp):
        value = evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    assert isinstance(node, ast.BinOp)
    left, right = evaluate(node.left), evaluate(node.right)
    op = _OPS[type(node.op)]
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    return left / right


def score_countdown(answer: str, numbers: Sequence[int], target: int) -> float:
    """RAGEN's Countdown reward for `answer` (see the module docstring): 1.0, 0.1 or 0.0."""
    try:
        tree = parse_expression(answer)
    except ExpressionError:
        return 0.0
    if Counter(numbers_of(tree)) != Counter(int(n) for n in numbers):
        return 0.0
    try:
        value = evaluate(tree)
    except ZeroDivisionError:
        return WELL_FORMED
    return CORRECT if value == target else WELL_FORMED


def solve(numbers: Sequence[int], target: int) -> str | None:
    """An expression using every number exactly once that equals `target` (exhaustive search
    over pairs of sub-results, exact arithmetic, deterministic order), or None."""
    start = [(Fraction(n), str(n)) for n in numbers]
    seen: set[tuple[Fraction, ...]] = set()

    def search(items: list[tuple[Fraction, str]]) -> str | None:
        if len(items) == 1:
            return items[0][1] if items[0][0] == target else None
        key = tuple(sorted(v for v, _ in items))
        if key in seen:
            return None
        seen.add(key)
        for i in range(len(items)):
            for j in range(len(items)):
                if i == j:
                    continue
                (a, ea), (b, eb) = items[i], items[j]
                rest = [items[k] for k in range(len(items)) if k not in (i, j)]
                options = [(a - b, f"({ea} - {eb})")]
                if i < j:  # commutative: one order is enough
                    options += [(a + b, f"({ea} + {eb})"), (a * b, f"({ea} * {eb})")]
                if b != 0:
                    options.append((a / b, f"({ea} / {eb})"))
                for value, text in options:
                    found = search([*rest, (value, text)])
                    if found is not None:
                        return found
        return None

    found = search(start)
    return _strip_outer(found) if found is not None else None


def _strip_outer(text: str) -> str:
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(text) - 1:
                return text  # the first "(" closes before the end: not an outer pair
        return text[1:-1]
    return text


def _construct(rng: random.Random, numbers: list[int], operators: str) -> tuple[int, str] | None:
    """Combine `numbers` in a random order with random operators, intermediate results staying
    positive integers; (value, expression) or None when this draw failed."""
    items = [(n, str(n)) for n in numbers]
    while len(items) > 1:
        i, j = rng.sample(range(len(items)), 2)
        (a, ea), (b, eb) = items[i], items[j]
        op = rng.choice(operators)
        if op == "+":
            value = a + b
        elif op == "-":
            if a <= b:
                return None
            value = a - b
        elif op == "*":
            value = a * b
        else:
            if b == 0 or a % b:
                return None
            value = a // b
        items = [items[k] for k in range(len(items)) if k not in (i, j)]
        items.append((value, f"({ea} {op} {eb})"))
    return items[0][0], _strip_outer(items[0][1])


def countdown_prompt(numbers: Sequence[int], target: int) -> str:
    """RAGEN's observation: "Target: 24, nums: [2, 3, 4]"."""
    return f"Target: {target}, nums: {list(numbers)}"


def make_countdown_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    min_numbers: int = 3,
    max_numbers: int = 4,
    max_number: int = 99,
    max_target: int = 100,
    operators: str = "+-*/",
) -> list[Task]:
    """`n` distinct Countdown problems for `split` (train and eval disjoint by a hash), each
    solvable by construction (see the module docstring). `fields = {"numbers", "target"}`,
    `answers = [the construction]`. `operators="+-"` gives RAGEN's data filter (problems
    solvable with + and - alone)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if not 2 <= min_numbers <= max_numbers:
        raise ValueError(f"need 2 <= min_numbers <= max_numbers, got {min_numbers}, {max_numbers}")
    if not operators or set(operators) - set("+-*/"):
        raise ValueError(f"operators must be a non-empty subset of '+-*/', got {operators!r}")
    rng = random.Random(f"countdown/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    count = rng.randint(min_numbers, max_numbers)  # drawn per task, kept until it succeeds
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        numbers = [rng.randint(1, max_number) for _ in range(count)]
        built = _construct(rng, numbers, operators)
        if built is None or not 1 <= built[0] <= max_target:
            continue
        target, expression = built
        key = f"{sorted(numbers)}|{target}"
        if key in seen or split_of(key) != split:
            continue
        seen.add(key)
        count = rng.randint(min_numbers, max_numbers)
        tasks.append(
            Task(
                task_id=f"countdown-{split}-{seed}-{len(tasks)}",
                prompt=countdown_prompt(numbers, target),
                answers=[expression],
                fields={"numbers": numbers, "target": target},
            )
        )
    raise RuntimeError(f"could not generate {n} distinct {split} Countdown problems")


class CountdownEnv(ToolEnv):
    """Answer an expression that reaches the target (see the module docstring); one turn."""

    # The puzzle: a task-file row needs it (envs/base.py).
    task_fields = ("numbers", "target")

    def __init__(self, format_penalty: float = 0.1, tool_timeout_s: float = 10.0) -> None:
        super().__init__([], format_penalty=format_penalty, tool_timeout_s=tool_timeout_s)

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def user_prompt(self, task: Task) -> str:
        return countdown_prompt(task.fields["numbers"], task.fields["target"])

    def score_answer(self, text: str) -> float:
        assert self.task is not None
        return score_countdown(text, self.task.fields["numbers"], int(self.task.fields["target"]))

    def expert_turn(self) -> str:
        assert self.task is not None, "expert_turn() before reset()"
        numbers, target = self.task.fields["numbers"], int(self.task.fields["target"])
        gold = next(
            (a for a in self.task.answers if score_countdown(a, numbers, target) == CORRECT), None
        )
        return f"<answer>{gold or solve(numbers, target) or ''}</answer>"

"""Absolute Zero pieces: executor-validated code tasks, learnability and solver rewards, TRR++.

Absolute Zero (Zhao et al. 2025, "Absolute Zero: Reinforced Self-play Reasoning with Zero
Data"). One model proposes and solves code-reasoning tasks about a program `p` defining
`f`, an input `i` (the argument list of a call, e.g. `3, [1, 2]`) and its output `o = p(i)`:
- deduction: given (p, i) predict o;  abduction: given (p, o) predict an i with p(i) = o;
- induction: given I/O pairs {(i_n, o_n)} and a message, write p with p(i_n) = o_n for all n.

A proposed (p, i) is a valid task when p parses, imports no banned module, calls no banned
builtin, runs without error in the sandbox, and is deterministic: two runs print the same
output. Rewards, with solve rate r_bar = mean solver success over n rollouts on the task:

    r_propose = 0 if r_bar in {0, 1} else 1 - r_bar          (learnability)
    r_solve   = 1 if correct else 0
    R(y) = r_role if the answer is passable; -0.5 if wrong but well formed; -1 format error

TRR++ (task-relative REINFORCE++, advantages normalised within each of the six (task type,
role) buckets) is `algos/advantages.py` trr_pp_advantages (algo.name=trr_pp).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from agentic_rl.tools.sandbox.client import CodeRunner

BANNED_MODULES = frozenset(
    {
        "os", "sys", "subprocess", "shutil", "socket", "signal", "multiprocessing", "threading",
        "asyncio", "random", "secrets", "time", "datetime", "calendar", "uuid", "hashlib",
        "pathlib", "io", "tempfile", "glob", "ctypes", "importlib", "builtins", "inspect", "gc",
        "pickle", "urllib", "http", "requests", "logging", "resource", "pty",
    }
)  # fmt: skip
BANNED_CALLS = frozenset(
    {"open", "exec", "eval", "compile", "__import__", "input", "globals", "locals", "vars",
     "getattr", "setattr", "delattr", "breakpoint", "exit", "quit", "id", "hash"}
)  # fmt: skip
WRONG_BUT_FORMATTED = -0.5
FORMAT_ERROR = -1.0
FUNCTION_NAME = "f"


def program_problem(program: str) -> str | None:
    """Why `program` cannot be a task (syntax, no `def f`, a banned import or call), or None.

    `id` and `hash` are banned because their values change between runs.
    """
    try:
        tree = ast.parse(program)
    except SyntaxError as err:
        return f"SyntaxError: {err.msg}"
    defines_f = any(
        isinstance(node, ast.FunctionDef) and node.name == FUNCTION_NAME for node in tree.body
    )
    if not defines_f:
        return f"the program must define a top-level function {FUNCTION_NAME}()"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            if name.split(".")[0] in BANNED_MODULES:
                return f"banned module: {name}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in BANNED_CALLS
        ):
            return f"banned call: {node.func.id}()"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return f"banned attribute: {node.attr}"
    return None


def call_program(program: str, input_text: str) -> str:
    """Code that defines `f` and prints `repr(f(<input>))` (the input is an argument list)."""
    return f"{program}\n\nprint(repr({FUNCTION_NAME}({input_text})))"


@dataclass
class Execution:
    """The printed `repr` of f(input), or why there is none."""

    ok: bool
    output: str = ""
    error: str = ""


def execute(runner: CodeRunner, program: str, input_text: str, timeout_s: float = 5.0) -> Execution:
    """Run f(input) once in the sandbox; `output` is the repr it printed (last line)."""
    problem = program_problem(program)
    if problem is not None:
        return Execution(ok=False, error=problem)
    try:
        ast.parse(f"f({input_text})", mode="eval")
    except SyntaxError:
        return Execution(ok=False, error="the input is not a valid argument list")
    result = runner.run(call_program(program, input_text), timeout_s)
    if not result.ok:
        return Execution(ok=False, error=result.error or "execution failed")
    lines = result.stdout.rstrip("\n").split("\n")
    return Execution(ok=True, output=lines[-1])


def validate_task(
    runner: CodeRunner, program: str, input_text: str, runs: int = 2, timeout_s: float = 5.0
) -> Execution:
    """A proposed (program, input) is valid when it executes `runs` times with the same output;
    the Execution then holds the gold output.

    Limitation: sandbox runs fork from warm workers, and forks of one worker share its string
    hash seed, so set-order nondeterminism over strings is caught only when the runs land on
    different workers (explicit randomness is refused earlier: `random`, `time`, `id`...).
    """
    first = execute(runner, program, input_text, timeout_s)
    if not first.ok:
        return first
    for _ in range(runs - 1):
        again = execute(runner, program, input_text, timeout_s)
        if not again.ok:
            return again
        if again.output != first.output:
            return Execution(ok=False, error="non-deterministic: two runs printed different output")
    return first


def outputs_equal(predicted: str, gold: str) -> bool:
    """Compare two output reprs as Python values (`literal_eval`), else as stripped text."""
    try:
        return ast.literal_eval(predicted.strip()) == ast.literal_eval(gold.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return predicted.strip() == gold.strip()


def deduction_correct(predicted_output: str, gold_output: str) -> bool:
    """Deduction: the predicted output equals the executor's output."""
    return outputs_equal(predicted_output, gold_output)


def abduction_correct(
    runner: CodeRunner, program: str, predicted_input: str, gold_output: str
) -> bool:
    """Abduction: any input whose output equals the gold output counts."""
    run = execute(runner, program, predicted_input)
    return run.ok and outputs_equal(run.output, gold_output)


def induction_correct(
    runner: CodeRunner, predicted_program: str, pairs: Sequence[tuple[str, str]]
) -> bool:
    """Induction: the predicted program maps every held-out input to its output."""
    for input_text, gold_output in pairs:
        run = execute(runner, predicted_program, input_text)
        if not (run.ok and outputs_equal(run.output, gold_output)):
            return False
    return bool(pairs)


def learnability_reward(solve_rate: float | Sequence[float]) -> float:
    """r_propose = 0 if the mean solve rate is 0 or 1, else 1 - rate (e.g. 0.25 -> 0.75)."""
    rates = [solve_rate] if isinstance(solve_rate, int | float) else list(solve_rate)
    if not rates:
        raise ValueError("learnability_reward needs at least one solve rate")
    mean = sum(float(r) for r in rates) / len(rates)
    return 0.0 if mean in (0.0, 1.0) else 1.0 - mean


def composite_reward(role_reward: float, passable: bool, well_formed: bool) -> float:
    """R(y): `role_reward` if passable, -0.5 if well formed but not, -1 for a format error."""
    if not well_formed:
        return FORMAT_ERROR
    return role_reward if passable else WRONG_BUT_FORMATTED


def solver_reward(correct: bool, well_formed: bool = True) -> float:
    """Solver: 1 correct; -0.5 wrong but well formed; -1 format error."""
    return composite_reward(1.0, correct, well_formed)


def proposer_reward(valid: bool, solve_rates: Sequence[float], well_formed: bool = True) -> float:
    """Proposer: learnability of a valid task; -0.5 invalid but well formed; -1 format error."""
    role = learnability_reward(solve_rates) if valid and solve_rates else 0.0
    return composite_reward(role, valid, well_formed)

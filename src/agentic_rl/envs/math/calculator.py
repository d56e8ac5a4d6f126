"""Arithmetic word problems solved with a calculator tool.

The numbers (10..999, two or three operations) are beyond what a 135M model computes in its
head, so the reward is reachable only by calling `<calc>` and copying the result. Train and eval
prompts are disjoint by construction: a prompt belongs to the eval split iff a hash of its text
falls in the eval bucket, and each split's generator rejects the other split's prompts.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import Literal

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.splits import split_of
from agentic_rl.tools.calculator import Calculator, evaluate
from agentic_rl.types import Action, StepResult, Task

Split = Literal["train", "eval"]

SYSTEM_PROMPT = (
    "Solve the math problem using the calculator. To calculate, write <calc>expression</calc> "
    "and the result will appear between <result> and </result>. When you know the answer, "
    "write <answer>number</answer> with only the number inside."
)

# A template draws its numbers from `rng` and returns (question, expression). The answer is the
# expression evaluated by the calculator itself, so the expert's tool call always matches it.
Template = Callable[[random.Random], tuple[str, str]]


def _n(rng: random.Random, low: int = 10, high: int = 999) -> int:
    return rng.randint(low, high)


def _pens(rng: random.Random) -> tuple[str, str]:
    a, b, c = _n(rng, 12, 99), _n(rng, 12, 99), _n(rng)
    return (
        f"A shop sells {a} boxes with {b} pens each and {c} loose pens. "
        "How many pens are there in total?",
        f"{a} * {b} + {c}",
    )


def _orchard(rng: random.Random) -> tuple[str, str]:
    a, b = _n(rng, 12, 99), _n(rng, 12, 99)
    c = rng.randint(10, min(999, a * b - 1))
    return (
        f"A farmer plants {a} rows of {b} apple trees. A storm destroys {c} trees. "
        "How many trees are left?",
        f"{a} * {b} - {c}",
    )


def _classes(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = _n(rng, 10, 60), _n(rng, 10, 60), _n(rng, 10, 60), _n(rng, 11, 49)
    return (
        f"Three classes have {a}, {b} and {c} students. Each student needs {d} notebooks. "
        "How many notebooks are needed?",
        f"({a} + {b} + {c}) * {d}",
    )


def _warehouse(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = _n(rng, 12, 99), _n(rng, 12, 99), _n(rng), _n(rng)
    c = min(c, a * b - 1)
    return (
        f"A warehouse holds {a} crates of {b} bottles. {c} bottles are shipped out and "
        f"{d} bottles arrive. How many bottles are in the warehouse now?",
        f"{a} * {b} - {c} + {d}",
    )


def _library(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = _n(rng, 12, 99), _n(rng, 12, 99), _n(rng, 11, 60), _n(rng, 11, 60)
    return (
        f"A library has {a} shelves with {b} books each. It buys {c} boxes of {d} books. "
        "How many books does it have now?",
        f"{a} * {b} + {c} * {d}",
    )


def _bakery(rng: random.Random) -> tuple[str, str]:
    per_bag, bags, extra = _n(rng, 11, 48), _n(rng, 12, 99), _n(rng)
    return (
        f"A bakery packs {per_bag * bags} cookies into bags of {per_bag}, then buys {extra} more "
        "full bags. How many bags does it have?",
        f"{per_bag * bags} / {per_bag} + {extra}",
    )


def _sales(rng: random.Random) -> tuple[str, str]:
    a, b, c, d = _n(rng, 40, 99), _n(rng, 40, 99), _n(rng, 10, 39), _n(rng, 10, 39)
    return (
        f"A store sold {a} shirts for {b} dollars each and {c} hats for {d} dollars each. "
        "How many more dollars did the shirts bring in than the hats?",
        f"{a} * {b} - {c} * {d}",
    )


def _savings(rng: random.Random) -> tuple[str, str]:
    a, b, c = _n(rng, 100, 999), _n(rng, 12, 52), _n(rng, 10, 99)
    return (
        f"Mara earns {a} dollars a week and spends {c} dollars a week. "
        f"How many dollars has she saved after {b} weeks?",
        f"({a} - {c}) * {b}",
    )


TEMPLATES: list[Template] = [
    _pens,
    _orchard,
    _classes,
    _warehouse,
    _library,
    _bakery,
    _sales,
    _savings,
]


def make_calculator_tasks(split: Split, n: int, seed: int = 0) -> list[Task]:
    """`n` distinct word problems for `split`; the same (split, n, seed) gives the same tasks.

    Each task has `answers=[str(int)]` and `fields={"expression", "template"}`.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(f"calculator/{split}/{seed}")
    tasks: list[Task] = []
    seen: set[str] = set()
    attempts = 0
    while len(tasks) < n:
        attempts += 1
        if attempts > 100 * n + 1000:  # the template space is huge; this guards a broken template
            raise RuntimeError(f"could not generate {n} distinct {split} calculator tasks")
        index = rng.randrange(len(TEMPLATES))
        question, expression = TEMPLATES[index](rng)
        if question in seen or split_of(question) != split:
            continue
        seen.add(question)
        answer = evaluate(expression)
        if answer != int(answer) or answer < 0:
            raise AssertionError(f"template {index} made a non-integer answer: {expression}")
        tasks.append(
            Task(
                task_id=f"calc-{split}-{seed}-{len(tasks)}",
                prompt=question,
                answers=[str(int(answer))],
                fields={"expression": expression, "template": TEMPLATES[index].__name__[1:]},
            )
        )
    return tasks


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d)[,_ ](?=\d{3}\b)")


def parse_number(text: str) -> float | None:
    """The single number in `text` ("1,905 pens" -> 1905.0); None if there are zero or several.

    Several numbers are refused so a model cannot list candidates and be rewarded for one.
    """
    cleaned = _THOUSANDS.sub("", text)
    numbers = _NUMBER.findall(cleaned)
    return float(numbers[0]) if len(numbers) == 1 else None


class CalculatorEnv(ToolEnv):
    """Word problems with a `calc` tool; reward 1 for the exact integer answer, else 0."""

    def __init__(
        self,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 2000,
        tool_call_reward: float = 0.0,
        step_latency_s: float = 0.0,
        expert_thoughts: bool = False,
    ) -> None:
        """`step_latency_s`: seconds every step waits before answering, a simulated slow tool or
        environment (a remote search API, a sandbox) for measuring asynchronous and distributed
        rollouts; 0 = off. `expert_thoughts`: the scripted expert reasons in a <think> block
        before each action (chain-of-thought demonstrations, e.g. Qwen3's cold start)."""
        if step_latency_s < 0:
            raise ValueError(f"step_latency_s must be >= 0, got {step_latency_s}")
        self.step_latency_s = step_latency_s
        self.expert_thoughts = expert_thoughts
        super().__init__(
            [Calculator()],
            format_penalty=format_penalty,
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            tool_call_reward=tool_call_reward,
        )

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def step(self, action: Action) -> StepResult:
        if self.step_latency_s:
            time.sleep(self.step_latency_s)
        return super().step(action)

    def score_answer(self, text: str) -> float:
        assert self.task is not None
        value = parse_number(text)
        if value is None:
            return 0.0
        return float(any(value == float(gold) for gold in self.task.answers))

    def expert_turn(self) -> str:
        """Compute with the calculator first, then answer with its result."""
        assert self.task is not None, "expert_turn() before reset()"
        expression, answer = self.task.fields["expression"], self.task.answers[0]
        if self.num_tool_calls() == 0:
            thought = (
                f"The question asks for {expression}. These numbers are too large to multiply "
                "reliably in my head, so I will use the calculator."
            )
            action = f"<calc>{expression}</calc>"
        else:
            result = self.last_observation().strip()
            thought = (
                f"The calculator returned {result} for {expression}, so the answer is {answer}."
            )
            action = f"<answer>{answer}</answer>"
        return f"<think>\n{thought}\n</think>\n{action}" if self.expert_thoughts else action

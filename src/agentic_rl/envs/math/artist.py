"""Math with several tools called as hermes JSON functions, scored with ARTIST's reward.

ARTIST (Singh et al. 2025, "Agentic Reasoning and Tool Integration for LLMs via Reinforcement
Learning"): the model interleaves reasoning with calls to several tools and is rewarded for the
answer, for tool calls that execute without error and for a well-formed trajectory:

    R = w_answer * correct + w_tool * (calls - errors) / calls + w_format * well_formed

(`rewards.tool_use.artist_reward`; the tool term is 0 for an episode without any call), with
`well_formed = calls / (calls + invalid turns)` (`rewards.tool_use.tool_format_reward`, 1.0
for a direct answer). A failed call is a calculator refusal or a python cell that raised or
timed out; a call the chat format rejects (bad JSON, an unknown tool, arguments failing the
tool's schema) is an invalid turn and counts against the format term instead.

The whole reward comes at the end: a step gives 0 (no per-turn format penalty, the format term
already counts malformed turns), and the answer gives R; a turn without any action, or an
episode a turn or token budget cuts (`truncation_reward`), scores as a wrong answer.

Tools: `python` (the sandbox, `MathToolEnv`) and `calc` (`tools.calculator.Calculator`). The
scripted expert picks the tool a task needs: `calc` when the task's program only prints an
arithmetic expression the calculator evaluates to the gold answer, `python` otherwise.
"""

from __future__ import annotations

import re

from agentic_rl.envs.math.interpreter import MathToolEnv
from agentic_rl.rewards.tool_use import artist_reward, tool_format_reward
from agentic_rl.tools.base import ToolError
from agentic_rl.tools.calculator import Calculator, evaluate, format_number
from agentic_rl.tools.sandbox.client import CodeRunner
from agentic_rl.types import Action, Observation, StepResult, Task

_PRINT_EXPRESSION = re.compile(r"^print\((?P<expr>[^\n]*)\)$")


def calculator_expression(code: str, gold: str) -> str | None:
    """The expression of a one-line `print(EXPR)` program when the calculator evaluates EXPR to
    `gold`, else None (the program needs python)."""
    match = _PRINT_EXPRESSION.match(code.strip())
    if match is None:
        return None
    try:
        value = evaluate(match.group("expr"))
    except ToolError:
        return None
    return match.group("expr") if format_number(value) == gold else None


class MultiToolMathEnv(MathToolEnv):
    """`envs.math_tasks` problems with the `python` and `calc` tools in the hermes format and
    ARTIST's reward (see the module docstring). The weights default to `artist_reward`'s."""

    def __init__(
        self,
        runner: CodeRunner | None = None,
        sandbox_url: str | None = None,
        pool_size: int = 2,
        w_answer: float = 1.0,
        w_tool: float = 0.5,
        w_format: float = 0.2,
        tool_timeout_s: float = 5.0,
        max_tool_output_chars: int = 1000,
    ) -> None:
        super().__init__(
            runner=runner,
            action_format="hermes_multi",
            score="binary",
            sandbox_url=sandbox_url,
            pool_size=pool_size,
            extra_tools=[Calculator()],
            format_penalty=0.0,
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            code_errors_are_tool_errors=True,
        )
        self.weights = {"w_answer": w_answer, "w_tool": w_tool, "w_format": w_format}
        self.tool_errors = 0
        self._correct = False

    def reset(self, task: Task, seed: int) -> Observation:
        self.tool_errors = 0
        self._correct = False
        return super().reset(task, seed)

    def _step_tool(self, action: Action) -> StepResult:
        result = super()._step_tool(action)
        self.tool_errors += int(result.info.get("tool_error", 0))
        return result

    def invalid_turns(self) -> int:
        """Malformed turns so far (unparsable calls, unknown tools, no action)."""
        return sum(1 for action, _ in self.history if action.kind == "invalid")

    def _outcome(self, correct: bool) -> float:
        self._correct = correct
        calls = self.num_tool_calls()
        return artist_reward(
            correct,
            calls,
            self.tool_errors,
            tool_format_reward(calls, self.invalid_turns()),
            **self.weights,
        )

    def step(self, action: Action) -> StepResult:
        result = super().step(action)
        if result.terminated:  # success is the answer's correctness, whatever the weights
            result.info["success"] = float(self._correct)
        return result

    def expert_turn(self) -> str:
        """`calc` or `python` on the task's program (see the module docstring), then answer."""
        assert self.task is not None, "expert_turn() before reset()"
        if self.num_tool_calls() > 0:
            return f"<answer>{self.task.answers[0]}</answer>"
        code = self.task.fields["code"]
        expression = calculator_expression(code, self.task.answers[0])
        return f"<calc>{expression}</calc>" if expression else f"<python>{code}</python>"

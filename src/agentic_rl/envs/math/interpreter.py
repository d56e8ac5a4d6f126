"""Math with a Python interpreter (ReTool / rStar2-Agent) and the same problems text-only.

`MathToolEnv`: the agent runs code in the sandbox (`tools.sandbox.PythonTool`) and answers in
`\\boxed{}`; the outcome is checked by `rewards.math` (exact for integers, symbolic otherwise):
+1 / -1 (`score="pm1"`, DAPO / ReTool) or 1 / 0 (`score="binary"`, R1 / rStar2). With
`shaping=True` a wrong answer gets ReTool's tool-call lift (`rewards.tool_use.retool_shaping`).
A turn without any action ends the episode with the wrong-answer value, and so does an
episode a turn or token budget cuts (`truncation_reward`, added by the rollout). The scripted
expert writes the task's Python program, then the answer: demonstrations for ReTool's SFT cold
start.

`TextOnlyMathEnv`: the same problems and reward, no tools, for the tool vs. text-only
comparison at an equal token budget.

Expert turns are tag-format text (`<python>code</python>`, `<answer>42</answer>`), the
project's contract: the rollout's expert actor renders them in the target chat format
(`ReToolFormat` turns them into `<code>```python ...```</code>` and `\\boxed{42}`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from agentic_rl.envs.base import ToolEnv
from agentic_rl.formats.tir import hermes_tools_prompt, ignored_tool_calls
from agentic_rl.rewards.math import SCORES, extract_math_answer, math_equal
from agentic_rl.rewards.tool_use import retool_shaping, retool_turns
from agentic_rl.tools.base import Tool
from agentic_rl.tools.sandbox.client import CodeRunner, PythonTool
from agentic_rl.tools.sandbox.pool import GRACE_S
from agentic_rl.tools.sandbox.shared import as_runner
from agentic_rl.types import Action, StepResult

ActionFormat = Literal["retool", "hermes_multi"]
# The error lines `tools.sandbox.client.format_result` writes after a failed or timed-out cell.
_CODE_ERROR = re.compile(r"^(?:Error: |Timed out)", re.MULTILINE)

RETOOL_PROMPT = (
    "Solve the math problem. You can run Python: write code between <code> and </code>, "
    "formatted as ```python ... ```. It runs in a fresh sandbox and what it prints appears "
    "between <interpreter> and </interpreter>. Give the final answer as \\boxed{answer} with "
    "only the number inside."
)
HERMES_SUFFIX = (
    "Solve the math problem; use the python tool for any computation (print the results). "
    "When you know the answer, write <answer>\\boxed{answer}</answer> with only the number."
)
TEXT_PROMPT = (
    "Solve the math problem step by step. Give the final answer as \\boxed{answer} with only "
    "the number inside."
)
USAGE_HINTS = {
    "retool": "Write code as <code>```python ...```</code> or give the answer as \\boxed{...}.",
    "hermes_multi": (
        'Call a tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call> or answer '
        "with <answer>...</answer>."
    ),
    "retool_text": "Give the final answer as \\boxed{...}.",
}


class TIRToolEnv(ToolEnv):
    """ToolEnv with the tool-integrated-reasoning formats' conventions.

    A tool Action whose format ignored extra calls of the turn (`formats_tir`, "ignore"
    policy) gets the note appended to its observation and `info["ignored_tool_calls"]` set;
    the usage hint of invalid turns names the syntax of `action_format`.
    """

    action_format: str = "retool"

    def _step_tool(self, action: Action) -> StepResult:
        result = super()._step_tool(action)
        ignored = ignored_tool_calls(action)
        if ignored:
            result.info["ignored_tool_calls"] = ignored
            if result.observation is not None:
                result.observation.content += "\n" + action.error
        return result

    def _usage_hint(self) -> str:
        return USAGE_HINTS.get(self.action_format) or super()._usage_hint()


def answer_is_correct(text: str, golds: Sequence[str]) -> bool:
    """Whether an answer (bare, boxed or "Answer: ...") equals any gold answer."""
    answer = extract_math_answer(text)
    answer = answer if answer is not None else text.strip()
    return any(math_equal(answer, gold) for gold in golds)


class _MathOutcome:
    """Outcome reward shared by the tool and text-only envs (mixed into a ToolEnv)."""

    score: str
    shaping: bool

    def _outcome(self: Any, correct: bool) -> float:
        right, wrong = SCORES[self.score]
        value = right if correct else wrong
        return retool_shaping(value, retool_turns(self.num_tool_calls())) if self.shaping else value

    def score_answer(self: Any, text: str) -> float:
        assert self.task is not None, "score_answer() before reset()"
        return self._outcome(answer_is_correct(text, self.task.answers))

    def step(self: Any, action: Action) -> StepResult:
        result = super().step(action)  # type: ignore[misc]
        if action.kind == "none":  # stopped without an answer: a wrong answer
            result.reward = self._outcome(False)
        return result

    def truncation_reward(self: Any) -> float:
        """Added by the rollout when a turn or token budget cut the episode: no answer is a
        wrong answer (with +1 / -1, running out of turns must not beat answering)."""
        return self._outcome(False)


def _check_score(score: str) -> None:
    if score not in SCORES:
        raise ValueError(f"unknown score {score!r}; valid: {', '.join(SCORES)}")


class MathToolEnv(_MathOutcome, TIRToolEnv):
    """Computation-heavy math problems (`envs.math_tasks`) with a sandboxed Python tool.

    `runner` is any `run(code, timeout_s)` object (a SandboxPool in tests); by default a shared
    process-wide pool of `pool_size` workers is started on the first call, or the sandbox
    service at `sandbox_url` is used. `tool_timeout_s` bounds each execution in the sandbox.
    With `code_errors_are_tool_errors`, a python response holding an error (the traceback's last
    line, a timeout) counts as a failed call (`info["tool_error"]`, the episode's `tool_errors`
    metric), which rStar2-Agent's RoC penalty and ARTIST's tool-success reward read; by default
    a code error is an ordinary result the model reads (ReTool).
    """

    def __init__(
        self,
        runner: CodeRunner | None = None,
        action_format: ActionFormat = "retool",
        score: str = "pm1",
        shaping: bool = False,
        sandbox_url: str | None = None,
        pool_size: int = 2,
        extra_tools: Sequence[Tool] = (),
        format_penalty: float = 0.1,
        tool_timeout_s: float = 5.0,
        max_tool_output_chars: int = 1000,
        tool_call_reward: float = 0.0,
        code_errors_are_tool_errors: bool = False,
    ) -> None:
        _check_score(score)
        if action_format not in ("retool", "hermes_multi"):
            raise ValueError(f"action_format must be retool or hermes_multi, got {action_format}")
        python = PythonTool(
            as_runner(runner, sandbox_url, pool_size),
            timeout_s=tool_timeout_s,
            max_chars=max_tool_output_chars,
        )
        super().__init__(
            [python, *extra_tools],
            format_penalty=format_penalty,
            # the thread bound of call_tool: the sandbox's own timeout plus its grace
            tool_timeout_s=tool_timeout_s + GRACE_S,
            max_tool_output_chars=max_tool_output_chars,
            tool_call_reward=tool_call_reward,
        )
        self.action_format = action_format
        self.score = score
        self.shaping = shaping
        self.code_errors_are_tool_errors = code_errors_are_tool_errors

    def _step_tool(self, action: Action) -> StepResult:
        result = super()._step_tool(action)
        obs = result.observation
        python = obs is not None and obs.name == "python"
        if self.code_errors_are_tool_errors and python and _CODE_ERROR.search(obs.content):
            result.info["tool_error"] = 1
        return result

    def system_prompt(self) -> str:
        if self.action_format == "retool":
            return RETOOL_PROMPT
        return f"{hermes_tools_prompt(self.tools)}\n\n{HERMES_SUFFIX}"

    def expert_turn(self) -> str:
        """Run the task's program first, then answer with the gold value it printed."""
        assert self.task is not None, "expert_turn() before reset()"
        if self.num_tool_calls() == 0:
            return f"<python>{self.task.fields['code']}</python>"
        return f"<answer>{self.task.answers[0]}</answer>"


class TextOnlyMathEnv(_MathOutcome, TIRToolEnv):
    """The same problems and reward with no tools (chat format "retool_text")."""

    action_format = "retool_text"

    def __init__(self, score: str = "pm1", format_penalty: float = 0.1) -> None:
        _check_score(score)
        super().__init__([], format_penalty=format_penalty)
        self.score = score
        self.shaping = False

    def system_prompt(self) -> str:
        return TEXT_PROMPT

    def expert_turn(self) -> str:
        """The answer directly (the expert knows it; a text-only model must work it out)."""
        assert self.task is not None, "expert_turn() before reset()"
        return f"<answer>{self.task.answers[0]}</answer>"

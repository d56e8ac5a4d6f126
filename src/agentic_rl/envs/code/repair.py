"""Code repair: fix a bug in one small Python file from an issue text (SWE-RL, Qwen3-Coder).

The shipped tasks (`envs/code/data/code_repair.jsonl`, self-written) each hold a file path, the
issue, the buggy file, the fixed file (the reference patch is their unified diff) and unit
tests (top-level asserts importing from the file). The agent answers in one turn with
`<think>...</think><solution>SEARCH/REPLACE edits</solution>` (chat format "swe_rl").

Rewards (`reward=`):
- "swe_rl" (Wei et al. 2025): difflib similarity of the predicted and the reference diffs,
  -1 on a format error; no execution (`rewards.code.swe_rl_reward`).
- "tests" (Qwen3-Coder style): the fraction of unit tests that pass in the sandbox on the
  patched file (`rewards.code.code_tests_reward`), -1 on a format error.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from pathlib import Path
from typing import Literal

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.splits import split_of
from agentic_rl.rewards.code import (
    FORMAT_ERROR_REWARD,
    FormatError,
    code_tests_reward,
    patch_similarity,
    predicted_files,
    search_replace_blocks,
)
from agentic_rl.tools.sandbox.client import CodeRunner
from agentic_rl.tools.sandbox.shared import as_runner
from agentic_rl.types import Action, StepResult, Task

Split = Literal["train", "eval", "all"]
DATA_FILE = Path(__file__).parent / "data" / "code_repair.jsonl"

SYSTEM_PROMPT = (
    "You fix bugs in Python code. First think about the issue inside <think> and </think>. "
    "Then write the fix inside <solution> and </solution> as one or more SEARCH/REPLACE edits:\n"
    "```python\n### path/to/file.py\n<<<<<<< SEARCH\nexact lines of the current file\n=======\n"
    "the new lines\n>>>>>>> REPLACE\n```\n"
    "The SEARCH part must copy whole lines of the file exactly, indentation included."
)


def oracle_completion(task: Task) -> str:
    """The reference answer: a short thought and the minimal SEARCH/REPLACE edit."""
    fields = task.fields
    blocks = search_replace_blocks(fields["path"], fields["buggy"], fields["fixed"])
    return f"<think>\n{fields['issue']}\n</think>\n<solution>\n{blocks}\n</solution>"


def _to_task(record: dict) -> Task:
    fields = {key: record[key] for key in ("path", "issue", "buggy", "fixed", "tests")}
    task = Task(
        task_id=f"repair-{record['task_id']}",
        prompt=(
            f"Issue: {record['issue']}\n\nFile {record['path']}:\n```python\n"
            f"{record['buggy'].rstrip()}\n```\nFix the issue."
        ),
        fields=fields,
    )
    task.answers = [oracle_completion(task)]
    return task


@lru_cache(maxsize=4)
def load_code_repair_tasks(path: str | None = None) -> tuple[Task, ...]:
    """Every task in the jsonl file (the shipped set by default), in file order."""
    lines = Path(path or DATA_FILE).read_text(encoding="utf-8").splitlines()
    return tuple(_to_task(json.loads(line)) for line in lines if line.strip())


def make_code_repair_tasks(split: Split, n: int, seed: int = 0) -> list[Task]:
    """`n` tasks of `split` in a seed-shuffled order, cycling when n exceeds the split."""
    if split not in ("train", "eval", "all"):
        raise ValueError(f"split must be 'train', 'eval' or 'all', got {split!r}")
    pool = [t for t in load_code_repair_tasks() if split in ("all", split_of(t.task_id))]
    random.Random(f"code_repair/{split}/{seed}").shuffle(pool)
    return [pool[i % len(pool)] for i in range(n)]


class CodeRepairEnv(ToolEnv):
    """One-turn repair of `task.fields["path"]`; see the module docstring for the rewards."""

    def __init__(
        self,
        reward: Literal["swe_rl", "tests"] = "swe_rl",
        runner: CodeRunner | None = None,
        sandbox_url: str | None = None,
        pool_size: int = 2,
        test_timeout_s: float = 5.0,
        format_penalty: float = 0.1,
        format_error_reward: float = FORMAT_ERROR_REWARD,
    ) -> None:
        if reward not in ("swe_rl", "tests"):
            raise ValueError(f"reward must be swe_rl or tests, got {reward!r}")
        super().__init__([], format_penalty=format_penalty)
        self.reward = reward
        self.runner = as_runner(runner, sandbox_url, pool_size)
        self.test_timeout_s = test_timeout_s
        self.format_error_reward = format_error_reward

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def _usage_hint(self) -> str:
        return "Answer with <think>...</think> then <solution>SEARCH/REPLACE edits</solution>."

    def score_completion(self, completion: str) -> tuple[float, dict[str, float]]:
        """(reward, info) for a whole completion; info has success, format_error, and for the
        tests reward tests_passed and tests_total."""
        assert self.task is not None, "score_completion() before reset()"
        fields = self.task.fields
        files = {fields["path"]: fields["buggy"]}
        if self.reward == "tests":
            outcome = code_tests_reward(
                self.runner, completion, files, fields["tests"], self.test_timeout_s
            )
            if outcome.error:
                return self.format_error_reward, {"format_error": 1, "success": 0.0}
            info = {
                "tests_passed": float(outcome.passed),
                "tests_total": float(outcome.total),
                "success": float(outcome.passed == outcome.total),
            }
            return outcome.reward, info
        try:
            pred = predicted_files(completion, files)
        except FormatError:
            return self.format_error_reward, {"format_error": 1, "success": 0.0}
        oracle = {fields["path"]: fields["fixed"]}
        exact = pred.get(fields["path"], "").rstrip() == fields["fixed"].rstrip()
        return patch_similarity(files, pred, oracle), {"success": float(exact)}

    def step(self, action: Action) -> StepResult:
        if action.kind != "answer" or self.task is None or self.done:
            return super().step(action)
        # The SWE-RL format check reads the whole turn (think + solution), not just the answer.
        reward, info = self.score_completion(action.raw or action.text)
        result = StepResult(
            observation=None, reward=reward, terminated=True, info={"answered": 1, **info}
        )
        self.done = True
        self.history.append((action, None))
        return result

    def expert_turn(self) -> str:
        """The reference edit, wrapped in <answer> so the tag parser reads it as an answer."""
        assert self.task is not None, "expert_turn() before reset()"
        return f"<answer>{self.task.answers[0]}</answer>"


__all__ = [
    "CodeRepairEnv",
    "load_code_repair_tasks",
    "make_code_repair_tasks",
    "oracle_completion",
]

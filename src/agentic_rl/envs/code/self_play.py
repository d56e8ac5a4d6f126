"""Absolute Zero's code-reasoning self-play as an env: every episode is one role on one task.

Absolute Zero (Zhao et al. 2025, "Absolute Zero: Reinforced Self-play Reasoning with Zero
Data"): one model proposes and solves tasks about a program `f`, an input `i` (the argument
list of a call) and its output `o = f(i)`, in three task types:
- deduction: given (f, i) predict o;  abduction: given (f, o) give an i with f(i) = o;
- induction: given some pairs (i_n, o_n) and a message, write an f that maps every input of
  the task (shown and held out) to its output.
`Task.fields["task_type"]` is the type and `Task.fields["role"]` the role ("propose" or
"solve"), which TRR++ reads. Rewards (rewards/absolute_zero.py), one turn per episode:
- solve: 1 if correct (checked by running code in the sandbox for abduction and induction),
  -0.5 if wrong but well formed, -1 without an `<answer>` (format error);
- propose: -1 format error, -0.5 if the sandbox rejects the proposal (syntax, banned import or
  call, an error, a timeout, two runs that print different outputs), and 0 for a valid one:
  its learnability reward needs solver rollouts of the new task by the policy, which the
  self-play step (`train/self_play.py`) runs and then writes over this 0.
A proposal answers `<answer>` with fenced blocks: deduction/abduction ```python (the program)
and ```input (its arguments); induction (given a program) several ```input blocks and one
```message. The seed programs (`data/self_play_seeds.jsonl`, hand-written; train and eval
programs differ) start the task buffer; eval tasks are solve tasks on the eval programs.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl.envs.base import ToolEnv
from agentic_rl.rewards.absolute_zero import (
    FORMAT_ERROR,
    WRONG_BUT_FORMATTED,
    abduction_correct,
    deduction_correct,
    induction_correct,
    solver_reward,
    validate_task,
)
from agentic_rl.tools.sandbox.client import CodeRunner, strip_code_fences
from agentic_rl.tools.sandbox.shared import as_runner
from agentic_rl.types import Action, Observation, StepResult, Task

TASK_TYPES = ("deduction", "abduction", "induction")
ROLES = ("propose", "solve")
SEEDS_FILE = Path(__file__).parent / "data" / "self_play_seeds.jsonl"
MIN_INDUCTION_PAIRS = 2
_BLOCK = re.compile(r"```(python|input|message)[ \t]*\n(.*?)```", re.DOTALL)

SYSTEM_PROMPT = (
    "You are a Python code reasoner. Put your final answer between <answer> and </answer>."
)
PROMPTS = {
    ("deduction", "solve"): (
        "Predict the output of f for this input. Answer with the output as a Python literal: "
        "<answer>OUTPUT</answer>.\n\n```python\n{program}\n```\nInput: f({input})"
    ),
    ("abduction", "solve"): (
        "Find an input for which f returns this output. Answer with the arguments as written "
        "inside f(...): <answer>ARGUMENTS</answer>.\n\n```python\n{program}\n```\n"
        "Output: {output}"
    ),
    ("induction", "solve"): (
        "Write a Python function f that maps each input to its output. Answer with the code: "
        "<answer>```python\ndef f(...):\n    ...\n```</answer>.\n\nHint: {message}\n{pairs}"
    ),
    ("deduction", "propose"): (
        "Propose a new task: a Python function f and an input for it, different from the "
        "examples. Answer as <answer>```python\ndef f(...):\n    ...\n```\n```input\nARGUMENTS\n"
        "```</answer>.\n\n{examples}"
    ),
    ("induction", "propose"): (
        "Propose at least {n} different inputs for this function and a hint about what it "
        "does. Answer as <answer>```input\nARGUMENTS\n```\n```input\nARGUMENTS\n```\n```message\n"
        "HINT\n```</answer>.\n\n```python\n{program}\n```"
    ),
}
PROMPTS["abduction", "propose"] = PROMPTS["deduction", "propose"]


@dataclass(frozen=True)
class CodeTask:
    """A program with inputs and the outputs the sandbox printed for them (`repr`s)."""

    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "program": self.program,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CodeTask:
        inputs, outputs = tuple(data["inputs"]), tuple(data["outputs"])
        return cls(data["program"], inputs, outputs, data.get("message", ""))


def seed_programs(split: str) -> list[CodeTask]:
    """The hand-written programs of `split` ("train" or "eval")."""
    rows = [json.loads(line) for line in SEEDS_FILE.read_text().splitlines() if line.strip()]
    return [CodeTask.from_dict(row) for row in rows if row["split"] == split]


def solve_task(task_id: str, task_type: str, code: CodeTask, index: int = 0) -> Task:
    """A solve task of `task_type` on `code` (deduction/abduction use pair `index`)."""
    fields: dict[str, Any] = {"task_type": task_type, "role": "solve", **code.to_dict()}
    if task_type == "induction":
        shown = (len(code.inputs) + 1) // 2  # the rest are held out: f must generalise
        shown_pairs = zip(code.inputs[:shown], code.outputs[:shown], strict=True)
        pairs = "\n".join(f"f({i}) == {o}" for i, o in shown_pairs)
        prompt = PROMPTS["induction", "solve"].format(message=code.message, pairs=pairs)
        answers = [code.program]
    else:
        fields["inputs"], fields["outputs"] = [code.inputs[index]], [code.outputs[index]]
        prompt = PROMPTS[task_type, "solve"].format(
            program=code.program, input=code.inputs[index], output=code.outputs[index]
        )
        answers = [code.outputs[index] if task_type == "deduction" else code.inputs[index]]
    return Task(task_id=task_id, prompt=prompt, answers=answers, fields=fields)


def propose_task(
    task_id: str, task_type: str, references: list[CodeTask], expert: CodeTask
) -> Task:
    """A propose task: deduction/abduction show `references` as examples; induction asks for
    inputs of `references[0]`'s program. `expert` is what the scripted expert proposes."""
    if task_type == "induction":
        prompt = PROMPTS["induction", "propose"].format(
            n=MIN_INDUCTION_PAIRS, program=references[0].program
        )
    else:
        examples = "\n\n".join(
            f"Example:\n```python\n{r.program}\n```\n```input\n{r.inputs[0]}\n```"
            for r in references
        )
        prompt = PROMPTS[task_type, "propose"].format(examples=examples)
    fields = {
        "task_type": task_type,
        "role": "propose",
        "references": [r.to_dict() for r in references],
        "expert": expert.to_dict(),
    }
    return Task(task_id=task_id, prompt=prompt, fields=fields)


def make_self_play_tasks(split: str, n: int, seed: int = 0, *, references: int = 2) -> list[Task]:
    """Train: `n` tasks cycling over the six (type, role) buckets on the train seed programs
    (drawn with replacement: training repeats tasks); eval: `n` distinct solve tasks on the eval
    programs (`eval_solve_tasks`)."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if references < 1 or references >= len(seed_programs("train")):
        raise ValueError(f"references must be in [1, {len(seed_programs('train')) - 1}]")
    if split == "eval":
        return eval_solve_tasks(n, seed)
    programs = seed_programs(split)
    rng = random.Random(f"self_play/{split}/{seed}")
    buckets = [(t, r) for t in TASK_TYPES for r in ROLES]
    tasks = []
    for k in range(n):
        task_type, role = buckets[k % len(buckets)]
        task_id = f"az-{split}-{seed}-{k}"
        if role == "solve":
            code = rng.choice(programs)
            tasks.append(solve_task(task_id, task_type, code, rng.randrange(len(code.inputs))))
        else:
            chosen = rng.sample(programs, references + 1)
            expert = chosen[0] if task_type == "induction" else chosen[-1]
            tasks.append(propose_task(task_id, task_type, chosen[:references], expert))
    return tasks


def eval_solve_tasks(n: int, seed: int = 0) -> list[Task]:
    """`n` distinct held-out solve tasks on the eval programs, taken in turn from the three
    types (a type whose tasks run out leaves its turns to the others): deduction on every
    (program, input) pair, abduction on every (program, output) pair, induction on every
    program. Without replacement, so a held-out rate counts different tasks (a draw with
    replacement from a few programs repeats them); more than there are is an error that says
    how many there are."""
    programs = seed_programs("eval")
    rng = random.Random(f"self_play/eval/{seed}")
    pools: dict[str, list[tuple[CodeTask, int]]] = {}
    for task_type in TASK_TYPES:
        if task_type == "induction":
            pool = [(code, 0) for code in programs]
        elif task_type == "abduction":  # two inputs with one output are one task
            first: dict[tuple[str, str], tuple[CodeTask, int]] = {}
            for code in programs:
                for i, out in enumerate(code.outputs):
                    first.setdefault((code.program, out), (code, i))
            pool = list(first.values())
        else:
            pool = [(code, i) for code in programs for i in range(len(code.inputs))]
        rng.shuffle(pool)
        pools[task_type] = pool
    available = sum(len(pool) for pool in pools.values())
    if n > available:
        raise ValueError(
            f"num_eval_tasks={n}: the {len(programs)} eval programs make {available} distinct "
            "solve tasks"
        )
    tasks: list[Task] = []
    while len(tasks) < n:
        for task_type in TASK_TYPES:
            if pools[task_type] and len(tasks) < n:
                code, index = pools[task_type].pop()
                tasks.append(solve_task(f"az-eval-{seed}-{len(tasks)}", task_type, code, index))
    return tasks


def parse_proposal(text: str, task_type: str) -> tuple[str, list[str], str] | None:
    """(program, inputs, message) of a proposal's answer text, or None when malformed.
    Induction proposals carry no program (it is the task's)."""
    blocks: dict[str, list[str]] = {"python": [], "input": [], "message": []}
    for kind, body in _BLOCK.findall(text):
        blocks[kind].append(body.strip())
    inputs = [i for i in blocks["input"] if i]
    if task_type == "induction":
        return ("", inputs, blocks["message"][0] if blocks["message"] else "") if inputs else None
    if not blocks["python"] or not inputs:
        return None
    return blocks["python"][0], inputs[:1], ""


def validate_proposal(
    runner: CodeRunner, task: Task, text: str, timeout_s: float = 5.0
) -> CodeTask | str | None:
    """The proposal in `text` for propose `task` as a validated CodeTask, an error message when
    the sandbox rejects it, or None for a format error."""
    task_type = task.fields["task_type"]
    parsed = parse_proposal(text, task_type)
    if parsed is None:
        return None
    program, inputs, message = parsed
    if task_type == "induction":
        program = task.fields["references"][0]["program"]
        inputs = list(dict.fromkeys(inputs))  # distinct inputs only
        if len(inputs) < MIN_INDUCTION_PAIRS:
            return f"induction needs at least {MIN_INDUCTION_PAIRS} distinct inputs"
    outputs = []
    for input_text in inputs:
        run = validate_task(runner, program, input_text, timeout_s=timeout_s)
        if not run.ok:
            return run.error or "invalid"
        outputs.append(run.output)
    return CodeTask(program, tuple(inputs), tuple(outputs), message)


class CodeSelfPlayEnv(ToolEnv):
    """One turn per episode: propose or solve a code task (see the module docstring).

    `runner` is any `run(code, timeout_s)` object; by default a shared sandbox pool of
    `pool_size` workers, or the sandbox service at `sandbox_url`. `references` (K, buffer
    programs shown to a proposer; the task generator takes it too) and `solve_samples` (n,
    solver rollouts that estimate a new task's solve rate) are the settings of the self-play
    step (`train/self_play.py`), which reads them here."""

    def __init__(
        self,
        runner: CodeRunner | None = None,
        sandbox_url: str | None = None,
        pool_size: int = 2,
        tool_timeout_s: float = 5.0,
        references: int = 2,
        solve_samples: int = 4,
    ) -> None:
        if references < 1 or solve_samples < 1:
            raise ValueError("references and solve_samples must be >= 1")
        super().__init__([], format_penalty=-FORMAT_ERROR)
        self.runner = as_runner(runner, sandbox_url, pool_size)
        self.timeout_s = tool_timeout_s
        self.references = references
        self.solve_samples = solve_samples

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def step(self, action: Action) -> StepResult:
        """Score an answer and end the episode. A turn without one is a format error (-1):
        an error observation (the episode goes on only if the rollout allows more turns; the
        recipe allows one) or, at end of sequence, the end."""
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        if action.kind == "answer" and not action.text.strip():
            action = Action(kind="invalid", error="empty <answer>", raw=action.raw)
        if action.kind != "answer":
            return super().step(action)  # format_penalty = 1: AZR's -1 for a format error
        text = action.text.strip()
        if self.task.fields["role"] == "propose":
            result = validate_proposal(self.runner, self.task, text, self.timeout_s)
            valid = isinstance(result, CodeTask)
            reward = 0.0 if valid else (FORMAT_ERROR if result is None else WRONG_BUT_FORMATTED)
            success, info = float(valid), {"valid": int(valid), "format_error": int(result is None)}
        else:
            correct = self.check_solution(text)
            reward, success, info = solver_reward(correct), float(correct), {}
        self.done = True
        self.history.append((action, None))
        return StepResult(None, reward, terminated=True, info={**info, "success": success})

    def check_solution(self, answer: str) -> bool:
        assert self.task is not None
        fields = self.task.fields
        if fields["task_type"] == "deduction":
            return deduction_correct(answer, fields["outputs"][0])
        if fields["task_type"] == "abduction":
            return abduction_correct(self.runner, fields["program"], answer, fields["outputs"][0])
        pairs = list(zip(fields["inputs"], fields["outputs"], strict=True))
        return induction_correct(self.runner, strip_code_fences(answer).strip(), pairs)

    def expert_turn(self) -> str:
        """The gold answer (solve) or the task's expert proposal (propose)."""
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        if fields["role"] == "solve":
            if fields["task_type"] == "induction":
                return f"<answer>```python\n{fields['program']}\n```</answer>"
            return f"<answer>{self.task.answers[0]}</answer>"
        expert = CodeTask.from_dict(fields["expert"])
        if fields["task_type"] == "induction":
            inputs = "\n".join(f"```input\n{i}\n```" for i in expert.inputs)
            return f"<answer>{inputs}\n```message\n{expert.message}\n```</answer>"
        return (
            f"<answer>```python\n{expert.program}\n```\n```input\n{expert.inputs[0]}\n```</answer>"
        )

    def reset(self, task: Task, seed: int) -> Observation:
        if task.fields.get("role") not in ROLES or task.fields.get("task_type") not in TASK_TYPES:
            raise ValueError(f"task {task.task_id} needs fields role and task_type")
        return super().reset(task, seed)

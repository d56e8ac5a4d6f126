"""BFCL multi-turn function calling (env `bfcl_multi_turn`): the calls run against BFCL's own
API classes and the episode is scored by BFCL's own state and response checks.

An episode is one entry of multi_turn_base, _miss_func, _miss_param or _long_context, played as
BFCL's prompting inference plays it (`BaseHandler.inference_multi_turn_prompting`):
- the opening is BFCL's system prompt with the entry's function docs and the first user turn
  (the docs as json, BFCL's default; `function_doc_format=python` writes them as BFCL's python
  prompt variant does, in ~45% of the tokens, which a model with 8k positions needs here);
- each model turn is one BFCL step: a reply that BFCL's decoder reads as calls
  (`[cd(folder='document'), ls()]`) is executed with BFCL's executor on this episode's API
  instances (file system, messaging, trading... with the entry's initial state), and the results
  come back as one tool message (BFCL's `format_execution_results_prompting`);
- a reply that decodes to no call (text, `[]`) ends the user turn: the next user message follows
  (for miss_func, at the listed turn, BFCL's "I have updated some more functions..." message with
  the held-out docs); after the last turn the episode ends;
- more than BFCL's `MAXIMUM_STEP_LIMIT` (20) call steps in one turn force-quit the episode.
At the end BFCL's `multi_turn_checker` replays the recorded calls on fresh instances beside the
ground truth and checks, turn by turn, the instances' state and that the ground truth's results
are among the model's: reward 1 when the entry passes, else 0 (BFCL's verdict is per entry).
Every step before the verdict reports the category's accuracy as 0 (`bfcl.not_yet_passed`), so
an episode that a turn or token budget cuts counts as failed in its category, as BFCL counts a
force-quit entry. An evaluation of all four categories also reports BFCL's multi-turn score,
`env/accuracy@multi_turn`, the plain mean of the four (bfcl_score.py).

What runs: BFCL's executor `eval`s the call strings it is given. Only calls that name a public
method of the entry's API classes with literal arguments (checked with `ast`) reach it; any
other call (a builtin, a nested call, a non-literal argument) is not run: its result is an
"Error during execution" text and it is not recorded, so BFCL's checker never runs it either.
A call BFCL would run and that fails (a wrong argument) gives BFCL's own error text.

BFCL caches API instances in its executor module's globals under the model name: each episode
uses its own name and drops its instances on the next reset and after scoring, so parallel
rollouts of one entry never share state.

The split (bfcl_data.py): scenario k is training data in all four categories when
k % train_fold_every == 0 and is never evaluated. The scripted expert plays the ground truth:
each turn's calls in one step (positional arguments named, since BFCL's decoder keeps keyword
arguments only), then `[]`.
"""

from __future__ import annotations

import ast
import itertools
import os
from typing import Any

from agentic_rl.envs.benchmarks.bfcl import (
    accuracy_key,
    check_function_doc_format,
    function_docs,
    invalid_reply,
    not_yet_passed,
    opening_messages,
    reply_text,
)
from agentic_rl.envs.benchmarks.bfcl_data import (
    bfcl,
    category_of,
    drop_instances,
    entry,
    fresh_entry,
    method_parameters,
    multi_turn_expert_turns,
    possible_answers,
)
from agentic_rl.envs.benchmarks.bfcl_score import summary_metrics as bfcl_summary_metrics
from agentic_rl.formats.calls import USER
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Observation, StepResult, Task

_EPISODES = itertools.count()
ERROR_PREFIX = "Error during execution: "  # BFCL's executor's own prefix for a failed call


def refusal(call: str, methods: set[str]) -> str | None:
    """Why a decoded call may not reach BFCL's executor, or None when it may: it must be one
    plain call of one of `methods` whose arguments are all literals (`ast.literal_eval`)."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return f"{call!r} is not a function call"
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return f"{call!r} is not a plain function call"
    if node.func.id not in methods:
        return f"name '{node.func.id}' is not defined"
    for value in [*node.args, *(k.value for k in node.keywords)]:
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return f"the arguments of {node.func.id} must be literal values"
    if any(k.arg is None for k in node.keywords):
        return f"the arguments of {node.func.id} must be named"
    return None


class BFCLMultiTurnEnv:
    """BFCL multi-turn function calling (base, miss_func, miss_param, long_context) against
    BFCL's API classes, rewarded by BFCL's state and response checks."""

    summary_metrics = staticmethod(bfcl_summary_metrics)
    """BFCL's aggregate scores over the per-category accuracies of an evaluation."""

    expert_turn_limit = 32
    """check_env's bound on the expert's turns: two per user turn (calls, then `[]`); the
    longest entry takes 15."""

    def __init__(self, format_penalty: float = 0.1, function_doc_format: str = "json") -> None:
        self.tools: list[Tool] = []
        self.format_penalty = format_penalty
        self.function_doc_format = check_function_doc_format(function_doc_format)
        self.task: Task | None = None
        self.done = False
        self._base = f"agentic_rl_{os.getpid()}_{next(_EPISODES)}"
        self.model_name = self._base

    # -- the episode's state ----------------------------------------------------------------
    def _entry(self) -> dict[str, Any]:
        assert self.task is not None
        return entry(self.task.task_id)

    def _category(self) -> str:
        assert self.task is not None
        return category_of(self.task.task_id)

    def reset(self, task: Task, seed: int) -> Observation:
        """BFCL's system prompt with the entry's function docs and the first user turn."""
        drop_instances(self.model_name)
        self.model_name = f"{self._base}_{next(_EPISODES)}"
        self.task, self.done = task, False
        test_entry = entry(task.task_id)
        self.turn, self.steps = 0, 0
        self.decoded: list[list[list[str]]] = [[]]  # turn -> step -> calls, as BFCL records
        self.methods = {
            name for c in test_entry["involved_classes"] for name in method_parameters(c)
        }
        self._expert: list[str] | None = None
        first_turn = self._turn_messages(0)
        return Observation(
            messages=opening_messages(test_entry, first_turn, self.function_doc_format)
        )

    def _turn_messages(self, turn: int) -> list[dict[str, str]]:
        """The user messages of `turn` (miss_func: BFCL's message revealing held-out docs).

        BFCL writes the held-out docs into that message as the list itself (json, its
        default); its prompt variants never reach the multi-turn categories, so under another
        `function_doc_format` they are written as the system prompt writes the others."""
        test_entry = self._entry()
        held_out = test_entry.get("missed_function", {})
        if str(turn) in held_out:
            template = bfcl().prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING
            docs = held_out[str(turn)]
            if self.function_doc_format != "json":
                docs = function_docs(docs, self.function_doc_format)
            return [{"role": "user", "content": template.format(functions=docs)}]
        return list(test_entry["question"][turn])

    # -- the protocol ----------------------------------------------------------------------
    def step(self, action: Action) -> StepResult:
        """One BFCL step: execute the reply's calls, or end the user turn."""
        if self.task is None or self.done:
            raise RuntimeError("step() needs a reset() first (and not after the episode ended)")
        reply = reply_text(action)
        if reply is None:
            return invalid_reply(action, self.format_penalty, self._category())
        lib = bfcl()
        try:
            calls = lib.handler.default_decode_execute_prompting(reply, False)
        except Exception:  # BFCL: a reply that does not decode calls nothing
            calls = []
        if lib.execution.is_empty_execute_response(calls):
            return self._end_turn()
        return self._execute(calls)

    def _execute(self, calls: list[str]) -> StepResult:
        lib, test_entry = bfcl(), self._entry()
        results, recorded = [], []
        for call in calls:
            why = refusal(call, self.methods)
            if why is not None:
                results.append(ERROR_PREFIX + why)
                continue
            out, _ = lib.execution.execute_multi_turn_func_call(
                [call],
                test_entry["initial_config"],
                test_entry["involved_classes"],
                self.model_name,
                test_entry["id"],
                long_context="long_context" in self._category(),
            )
            results += out
            recorded.append(call)
        if recorded:
            self.decoded[self.turn].append(recorded)
        self.steps += 1
        errors = sum(r.startswith(ERROR_PREFIX) for r in results)
        info: dict[str, Any] = {
            "tool_call": len(calls),
            "tool_error": errors,
            **not_yet_passed(self._category()),
        }
        if self.steps > lib.prompts.MAXIMUM_STEP_LIMIT:  # BFCL force-quits the entry
            return self._finish(False, "multi_turn:force_terminated", info)
        content = lib.handler.format_execution_results_prompting(
            {}, results, {"model_responses_decoded": calls}
        )
        return StepResult(observation=Observation(content=content, name="tool"), info=info)

    def _end_turn(self) -> StepResult:
        self.turn += 1
        self.steps = 0
        questions = self._entry()["question"]
        if self.turn == len(questions):
            passed, error = self._verdict()
            return self._finish(passed, error, {})
        self.decoded.append([])
        text = "\n\n".join(m["content"] for m in self._turn_messages(self.turn))
        return StepResult(
            observation=Observation(content=text, name=USER), info=not_yet_passed(self._category())
        )

    def _verdict(self) -> tuple[bool, str]:
        """BFCL's multi_turn_checker on the recorded calls, on fresh instances."""
        assert self.task is not None
        lib, name = bfcl(), f"{self.model_name}_score"
        truth = possible_answers(self._category())[self.task.task_id]
        try:
            result = lib.multi_turn.multi_turn_checker(
                self.decoded, truth, fresh_entry(self.task.task_id), self._category(), name
            )
        finally:
            drop_instances(name)
        return bool(result["valid"]), "" if result["valid"] else str(result.get("error_type"))

    def _finish(self, passed: bool, error: str, info: dict[str, Any]) -> StepResult:
        self.done = True
        drop_instances(self.model_name)
        return StepResult(
            observation=None,
            reward=float(passed),
            terminated=True,
            info={
                **info,
                "success": float(passed),
                accuracy_key(self._category()): float(passed),
                "bfcl_error": error,
            },
        )

    def expert_turn(self) -> str:
        """The ground truth's calls of this turn (one step), then `[]` to end the turn."""
        if self.task is None:
            raise RuntimeError("expert_turn() needs a reset() first")
        if self._expert is None:
            self._expert = multi_turn_expert_turns(self._entry())
        calls = self._expert[self.turn] if self.steps == 0 else "[]"
        return f"<answer>{calls}</answer>"

"""BFCL single-turn function calling (env `bfcl`), scored by BFCL's own AST checker.

One entry of the Berkeley Function Calling Leaderboard per episode: BFCL's own system prompt
(its prompting format: the function docs as JSON, or in another of BFCL's doc layouts with
`function_doc_format`, "return the calls as
`[func_name1(params_name1=params_value1, ...), func_name2(params)]`"), the entry's user turn, and
one model reply, which BFCL's decoder and checker score exactly as its eval runner does for a
prompting model (`bfcl_data.single_turn_verdict`): 1 when it passes, 0 when it does not. The
reported categories are BFCL's non-live ones, simple_java and simple_javascript included (their
replies are decoded with BFCL's Java / JavaScript decoders and checked with its AST checker in
that language); training uses the live ones (see bfcl_data.py for the split and why it cannot
overlap). Per-category accuracy is the episode metric `env/accuracy@<category>` (averaged over
that category's episodes: train/summary.py), and an evaluation's summary adds BFCL's own
aggregates of them where all their categories were run (bfcl_score.py: `non_live_simple_ast`,
`non_live`; BFCL's `overall` needs categories no env here runs).

Read the reply in the `python_calls` chat format (formats/calls.py: the turn's text is the
action). Under another format an `<answer>` is scored on what is inside it and a turn without
tags on its text; a tool call in another format's syntax is a format error (an error
observation and `-format_penalty`), as is any malformed turn.

The scripted expert answers with the possible answer's first accepted value of each parameter
(an empty call list, `[]`, for irrelevance), in Java or JavaScript syntax for those categories.
It passes BFCL's checker on all but 14 of the 3,618 entries used (every reported entry and
every live entry the training split keeps): 5 live, 2 Python non-live and 7 simple_java, whose
possible answers accept no reply it can write (e.g. a required parameter with no accepted
value, or a non-empty Java `HashMap`, whose initializer BFCL's Java decoder drops). Those are
never demonstrated; the Java ones are evaluation entries, never trained on anyway.
"""

from __future__ import annotations

import re
from typing import Any

from agentic_rl.envs.benchmarks.bfcl_data import (
    bfcl,
    category_of,
    entry,
    single_turn_expert,
    single_turn_verdict,
)
from agentic_rl.envs.benchmarks.bfcl_score import summary_metrics as bfcl_summary_metrics
from agentic_rl.tools.base import Tool
from agentic_rl.types import Action, Message, Observation, StepResult, Task

FORMAT_HINT = (
    "Reply with the function calls only, as a Python list: [func_name(param=value, ...)] "
    "(an empty list [] when no function fits)."
)
# End-of-turn markers a chat template leaves in a raw turn (<|im_end|>, <|eot_id|>, </s>...).
_SPECIAL = re.compile(r"<\|[^<>|]*\|>|</s>|<eos>|<end_of_turn>")


def accuracy_key(category: str) -> str:
    """The episode metric holding BFCL's per-category accuracy (1 pass, 0 fail)."""
    return f"env/accuracy@{category}"


def not_yet_passed(category: str) -> dict[str, float]:
    """The info of every step before BFCL's verdict: the category's accuracy so far, 0.

    Env metrics are summed over an episode's steps (rollout/episode.py) and a subset metric is
    averaged over the episodes that report it (train/summary.py). An episode that a turn or
    token budget cuts before the verdict must still count, as a failure (BFCL counts a
    force-quit entry as failed); without this it would report nothing and drop out of its
    category's accuracy, which would then be measured on the finished episodes only."""
    return {accuracy_key(category): 0.0}


def invalid_reply(action: Action, format_penalty: float, category: str) -> StepResult:
    """A turn with no reply BFCL can decode: an error observation with the format hint and the
    format penalty; the episode goes on."""
    problem = action.error or f"a {action.kind} action"
    return StepResult(
        observation=Observation(content=f"Invalid reply ({problem}). {FORMAT_HINT}", name="error"),
        reward=-format_penalty,
        info={"invalid_action": 1, **not_yet_passed(category)},
    )


def reply_text(action: Action) -> str | None:
    """The text BFCL would decode from a turn: an answer's text, or a tagless turn's raw text
    without end-of-turn markers; None for a tool call or a malformed turn."""
    if action.kind == "answer":
        return action.text
    if action.kind == "none":
        return _SPECIAL.sub("", action.raw).strip()
    return None


FUNCTION_DOC_FORMATS = ("json", "python", "xml")
"""The function-doc layouts of BFCL's own prompt variants (its format-sensitivity study,
`func_doc_fmt`): json is its default and the leaderboard's; python writes each function as a
docstring stub and takes ~45% of json's tokens on the multi-turn entries (median 3,110 tokens
against 7,197 with the bundled model's tokenizer), so those prompts fit a model with 8k
positions."""


def check_function_doc_format(function_doc_format: str) -> str:
    if function_doc_format not in FUNCTION_DOC_FORMATS:
        raise ValueError(
            f"function_doc_format must be one of {FUNCTION_DOC_FORMATS} (BFCL's func_doc_fmt), "
            f"got {function_doc_format!r}"
        )
    return function_doc_format


def function_docs(functions: list[dict[str, Any]], function_doc_format: str) -> str:
    """Function docs written as BFCL writes them in a prompt variant's system prompt."""
    return bfcl().handler.format_function_doc(functions, function_doc_format)


def opening_messages(
    test_entry: dict[str, Any], turn: list[Message], function_doc_format: str = "json"
) -> list[Message]:
    """BFCL's system prompt for a prompting model followed by the entry's first turn.

    BFCL's `system_prompt_pre_processing_chat_model`, with the function docs in
    `function_doc_format`: the entry's own prompt variant (BFCL's default for every category
    used here) with only its `func_doc_fmt` replaced, and a system message the entry brings
    merged after it as BFCL merges it. With json the messages are BFCL's exactly (tested)."""
    handler = bfcl().handler
    variant = bfcl().utils.extract_prompt_format_from_id(test_entry["id"])
    variant = re.sub(r"func_doc_fmt=\w+", f"func_doc_fmt={function_doc_format}", variant)
    system = handler.formulate_system_prompt(variant, test_entry["function"])
    messages = [{"role": m["role"], "content": m["content"]} for m in turn]  # new dicts
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = system + "\n\n" + messages[0]["content"]
    else:
        messages.insert(0, {"role": "system", "content": system})
    return messages


class BFCLEnv:
    """BFCL single-turn function calling (simple in Python, Java and JavaScript, multiple,
    parallel, parallel_multiple, irrelevance), rewarded by BFCL's own AST checker."""

    summary_metrics = staticmethod(bfcl_summary_metrics)
    """BFCL's aggregate scores over the per-category accuracies of an evaluation."""

    def __init__(self, format_penalty: float = 0.1, function_doc_format: str = "json") -> None:
        self.tools: list[Tool] = []
        self.format_penalty = format_penalty
        self.function_doc_format = check_function_doc_format(function_doc_format)
        self.task: Task | None = None
        self.done = False

    def reset(self, task: Task, seed: int) -> Observation:
        """BFCL's system prompt and the entry's question."""
        test_entry = entry(task.task_id)
        self.task, self.done = task, False
        first_turn = test_entry["question"][0]
        return Observation(
            messages=opening_messages(test_entry, first_turn, self.function_doc_format)
        )

    def step(self, action: Action) -> StepResult:
        """Score the reply with BFCL's checker (ends the episode); a malformed turn is an error
        observation and a format penalty."""
        if self.task is None or self.done:
            raise RuntimeError("step() needs a reset() first (and not after the episode ended)")
        category = category_of(self.task.task_id)
        reply = reply_text(action)
        if reply is None:
            return invalid_reply(action, self.format_penalty, category)
        passed, error = single_turn_verdict(entry(self.task.task_id), reply)
        self.done = True
        return StepResult(
            observation=None,
            reward=float(passed),
            terminated=True,
            info={
                "success": float(passed),
                accuracy_key(category): float(passed),
                "bfcl_error": error,
            },
        )

    def expert_turn(self) -> str:
        """The possible answer as a call list (`[]` for irrelevance), inside <answer> tags."""
        if self.task is None:
            raise RuntimeError("expert_turn() needs a reset() first")
        return f"<answer>{single_turn_expert(entry(self.task.task_id))}</answer>"

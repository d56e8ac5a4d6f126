r"""Outcome rewards of search agents, one per system, TRL-shaped and as plain per-text scores.

Each `*_score(text, golds, ...)` scores one completion (the text after the prompt, turns and
inserted results included); each `*_reward(completions, **columns) -> list[float]` is the
TRL-shaped batch version, reading the gold answers from the `answers` column (or
`golden_answers`, or veRL's `ground_truth` / `reward_model` dicts) and system-specific columns
(`search_keys` for StepSearch). `REWARDS` maps a system name to its batch function.

- Search-R1 v0.3 (Jin et al. 2025): EM & valid format 1.0; EM & bad format 1 - 0.2 = 0.8;
  wrong & valid 0.2 (+ `retrieval_score` if a gold answer is in an <information> span; 0 in the
  shipped scripts); wrong & bad format with an answer 0.1; no answer & bad format 0.
- ReSearch (Chen et al. 2025): bad format 0; else F1 of the \boxed{} answer, 0.1 if that is 0.
- R1-Searcher (Song et al. 2025): stage 1: +1 / -1 cover-EM, +0.5 if the search tags are
  balanced with >= 1 search, +0.5 if exactly one think and one answer span; stage 2:
  F1 - 2 x [bad format].
- StepSearch (Wang et al. 2025): -1 without an answer or with text after the last answer; else
  F1 + 0.618 x search-key match (step rewards: rewards/step_search.py).
- DeepResearcher (Zheng et al. 2025): -1 if any turn is malformed; else F1.
- ASearcher (Gao et al. 2025): F1 (or EM) x [every turn well formed].
- Agent-R1 (2025): EM + 0.1 per well-formed tool-call turn (process reward,
  capped at 0.5); -1 + that process reward if any turn is malformed.
- ZeroSearch (Sun et al. 2025): F1 of the answer.

Differences from the reference code: completions are scored without the prompt, so the last
<answer> counts (Search-R1 skips the prompt's example answer by needing two); ReSearch's
"over length" check (response must end with EOS) is left to the rollout, which marks truncated
episodes; StepSearch's key match keeps each key group's best query score (the reference keeps the
last one, so a later, worse query could lower it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import partial, wraps
from typing import Any

from agentic_rl.rewards.qa import _completion_text, cover_exact_match, exact_match, f1_score
from agentic_rl.rewards.search_format import (
    DEFAULT_TAGS,
    SearchTags,
    balanced,
    blocks,
    extract_boxed,
    last_block,
    research_valid_format,
    search_r1_valid_sequence,
    strip_end_tokens,
    turn_format_flags,
)

Golds = Sequence[str]
WEB_ACTIONS = ("web_search", "browse_webpage", "search")
ASEARCHER_ACTIONS = ("search", "access", "web_search", "browse_webpage")


def _answer(text: str, tags: SearchTags) -> str | None:
    return last_block(text, tags.answer)


def _cleaned(score: Callable[..., float]) -> Callable[..., float]:
    """Score functions see the completion without trailing end-of-turn tokens."""

    @wraps(score)
    def wrapper(text: str, *args: Any, **kwargs: Any) -> float:
        return score(strip_end_tokens(text), *args, **kwargs)

    return wrapper


@_cleaned
def search_r1_score(
    text: str,
    golds: Golds,
    tags: SearchTags = DEFAULT_TAGS,
    structure_format_score: float = 0.2,
    final_format_score: float = 0.1,
    retrieval_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """Search-R1 v0.3 `compute_score_em` with the shipped weights (see the module table)."""
    valid, _ = search_r1_valid_sequence(text, tags)
    retrieved = valid and any(
        cover_exact_match(block, golds) > 0 for block in blocks(text, tags.result)
    )
    answer = _answer(text, tags)
    if answer is not None and exact_match(answer, golds):
        return score if valid else score - structure_format_score
    if valid:
        return structure_format_score + (retrieval_score if retrieved else 0.0)
    return 0.0 if answer is None else final_format_score


@_cleaned
def research_score(text: str, golds: Golds, tags: SearchTags = DEFAULT_TAGS) -> float:
    r"""ReSearch: 0 for bad format, else F1 of the \boxed{} answer, 0.1 if that F1 is 0."""
    valid, _ = research_valid_format(text, tags)
    answer = _answer(text, tags)
    boxed = extract_boxed(answer) if valid and answer is not None else None
    if boxed is None:
        return 0.0
    f1 = f1_score(boxed, golds)
    return f1 if f1 > 0 else 0.1


@_cleaned
def r1_searcher_stage1_score(
    text: str, golds: Golds, tags: SearchTags = DEFAULT_TAGS, answer_weight: float = 1.0
) -> float:
    """R1-Searcher stage 1: answer +-1 (cover-EM), +0.5 retrieval, +0.5 format."""
    answer = _answer(text, tags)
    correct = answer is not None and cover_exact_match(answer, golds) > 0
    reward = answer_weight if correct else -answer_weight
    searches = text.count(tags.search[0])
    if searches >= 1 and balanced(text, tags.search):
        reward += 0.5
    one = all(text.count(t) == 1 for t in (*tags.think, *tags.answer))
    if one and len(blocks(text, tags.think)) == 1 and answer is not None:
        reward += 0.5
    return reward


def r1_searcher_format_ok(text: str, tags: SearchTags = DEFAULT_TAGS) -> bool:
    """R1-Searcher stage-2 format: think spans balanced and present, exactly one answer span at
    the end, search and result tags balanced, no search/result tag inside the answer."""
    text = strip_end_tokens(text)
    if not balanced(text, tags.think) or text.count(tags.think[0]) == 0:
        return False
    if text.count(tags.answer[0]) != 1 or text.count(tags.answer[1]) != 1:
        return False
    if not (balanced(text, tags.search) and balanced(text, tags.result)):
        return False
    answer = _answer(text, tags)
    if answer is None or not text.rstrip().endswith(tags.answer[1]):
        return False
    return not any(t in answer for t in (*tags.search, *tags.result))


@_cleaned
def r1_searcher_stage2_score(
    text: str, golds: Golds, tags: SearchTags = DEFAULT_TAGS, format_penalty: float = 2.0
) -> float:
    """R1-Searcher stage 2: F1 of the answer, minus 2 when the format is bad."""
    answer = _answer(text, tags)
    f1 = f1_score(answer, golds) if answer is not None else 0.0
    return f1 - (0.0 if r1_searcher_format_ok(text, tags) else format_penalty)


def search_key_match(queries: Sequence[str], keys: Sequence[Sequence[str]]) -> float:
    """StepSearch's `step_search_keys_match`: each query is credited to the key group (list of
    accepted phrasings) it matches best by token F1; score = sum of each group's best credit /
    number of groups. 0 without queries or keys."""
    if not queries or not keys:
        return 0.0
    best = [0.0] * len(keys)
    for query in queries:
        scores = [f1_score(query, list(group)) if group else 0.0 for group in keys]
        group = max(range(len(keys)), key=lambda g: scores[g])
        best[group] = max(best[group], scores[group])
    return sum(best) / len(keys)


@_cleaned
def stepsearch_outcome_score(
    text: str,
    golds: Golds,
    search_keys: Sequence[Sequence[str]] | None = None,
    tags: SearchTags = DEFAULT_TAGS,
    key_weight: float = 0.618,
) -> float:
    """StepSearch outcome: -1 without a final answer (or with text after it); else
    F1 + 0.618 x `search_key_match(queries, search_keys)`."""
    pattern = re.escape(tags.answer[0]) + r"(.*?)" + re.escape(tags.answer[1])
    spans = list(re.finditer(pattern, text, re.DOTALL))
    if not spans or text[spans[-1].end() :].strip():
        return -1.0
    f1 = f1_score(spans[-1].group(1).strip(), golds)
    return f1 + key_weight * search_key_match(blocks(text, tags.search), search_keys or [])


@_cleaned
def deepresearcher_score(
    text: str,
    golds: Golds,
    tags: SearchTags = DEFAULT_TAGS,
    action_tags: Sequence[str] = WEB_ACTIONS,
    require_think: bool = True,
) -> float:
    """DeepResearcher: -1 if any turn is malformed (each turn: <think>, then one tool call or the
    final answer), else F1 of the answer."""
    if not all(turn_format_flags(text, action_tags, tags, require_think)):
        return -1.0
    return f1_score(_answer(text, tags) or "", golds)


@_cleaned
def asearcher_score(
    text: str,
    golds: Golds,
    tags: SearchTags = DEFAULT_TAGS,
    metric: str = "f1",
    action_tags: Sequence[str] = ASEARCHER_ACTIONS,
) -> float:
    """ASearcher: F1 (or EM) of the answer times the product of the per-turn format flags."""
    if metric not in ("f1", "em"):
        raise ValueError(f"metric must be 'f1' or 'em', got {metric!r}")
    if not all(turn_format_flags(text, action_tags, tags)):
        return 0.0
    answer = _answer(text, tags) or ""
    return f1_score(answer, golds) if metric == "f1" else exact_match(answer, golds)


@_cleaned
def agent_r1_score(
    text: str,
    golds: Golds,
    tags: SearchTags = DEFAULT_TAGS,
    action_tags: Sequence[str] = ("search",),
    tool_call_bonus: float = 0.1,
    max_tool_bonus: float = 0.5,
) -> float:
    """Agent-R1: EM + format. Process reward `tool_call_bonus` per well-formed tool-call turn
    (capped); a malformed episode gets -1 + the process reward instead of the EM."""
    flags = turn_format_flags(text, action_tags, tags)
    process = min(tool_call_bonus * sum(flags[:-1]), max_tool_bonus)
    if not all(flags):
        return -1.0 + process
    return exact_match(_answer(text, tags) or "", golds) + process


@_cleaned
def answer_f1_score(text: str, golds: Golds, tags: SearchTags = DEFAULT_TAGS) -> float:
    """F1 of the last answer span (0 without one): ZeroSearch's reward."""
    answer = _answer(text, tags)
    return 0.0 if answer is None else f1_score(answer, golds)


# ---------------------------------------------------------------------------------------------
# TRL-shaped batch functions
# ---------------------------------------------------------------------------------------------


def _gold_list(value: Any) -> list[str]:
    if isinstance(value, Mapping):  # veRL ground_truth {"target": [...]} / reward_model
        value = value.get("ground_truth", value)
        value = value.get("target", []) if isinstance(value, Mapping) else value
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def golds_from_columns(columns: Mapping[str, Any], n: int) -> list[list[str]]:
    """Gold answers per completion from `answers`, `golden_answers`, `ground_truth` or
    `reward_model` (the first present)."""
    for key in ("answers", "golden_answers", "ground_truth", "reward_model"):
        if columns.get(key) is not None:
            values = list(columns[key])
            if len(values) != n:
                raise ValueError(f"{n} completions but {len(values)} rows in column {key!r}")
            return [_gold_list(v) for v in values]
    raise ValueError("no gold answers: pass an 'answers' (or 'golden_answers') column")


def _batch(
    score: Callable[..., float], name: str, per_row: Sequence[str] = ()
) -> Callable[..., list[float]]:
    def reward(completions: Sequence[Any], **columns: Any) -> list[float]:
        n = len(completions)
        golds = golds_from_columns(columns, n)
        extras = {key: list(columns.get(key) or [None] * n) for key in per_row}
        return [
            float(score(_completion_text(c), g, **{k: v[i] for k, v in extras.items()}))
            for i, (c, g) in enumerate(zip(completions, golds, strict=True))
        ]

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = f"TRL-shaped `{name}(completions, **columns) -> list[float]` (see module)."
    return reward


search_r1_reward = _batch(search_r1_score, "search_r1_reward")
research_reward = _batch(research_score, "research_reward")
r1_searcher_stage1_reward = _batch(r1_searcher_stage1_score, "r1_searcher_stage1_reward")
r1_searcher_stage2_reward = _batch(r1_searcher_stage2_score, "r1_searcher_stage2_reward")
stepsearch_outcome_reward = _batch(
    stepsearch_outcome_score, "stepsearch_outcome_reward", per_row=("search_keys",)
)
deepresearcher_reward = _batch(deepresearcher_score, "deepresearcher_reward")
asearcher_reward = _batch(asearcher_score, "asearcher_reward")
asearcher_em_reward = _batch(partial(asearcher_score, metric="em"), "asearcher_em_reward")
agent_r1_reward = _batch(agent_r1_score, "agent_r1_reward")
zerosearch_reward = _batch(answer_f1_score, "zerosearch_reward")

REWARDS: dict[str, Callable[..., list[float]]] = {
    "search_r1": search_r1_reward,
    "research": research_reward,
    "r1_searcher_stage1": r1_searcher_stage1_reward,
    "r1_searcher_stage2": r1_searcher_stage2_reward,
    "zerosearch": zerosearch_reward,
    "stepsearch": stepsearch_outcome_reward,
    "deepresearcher": deepresearcher_reward,
    "asearcher": asearcher_reward,
    "asearcher_em": asearcher_em_reward,
    "agent_r1": agent_r1_reward,
}

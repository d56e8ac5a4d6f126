"""Rewards for tool-integrated reasoning: ReTool shaping, ARTIST tool-success and format terms.

ReTool (Feng et al. 2025, "ReTool: Reinforcement Learning for Strategic Tool Use in LLMs"):
outcome +1 / -1, and optionally, to encourage calling the interpreter, a wrong answer is
lifted by the number of turns:

    shaped = min(-0.6, score + (turns - 2) / 2 * 0.1)   if score < 0, else score

`turns` counts chat messages as the ReTool recipe does: the prompt and the final reply are 2,
and each interpreter call adds an assistant turn and a tool turn, so `turns = 2 + 2 * calls`
(`retool_turns`) and the lift is 0.1 per call, capped so a wrong answer stays <= -0.6.

ARTIST (Singh et al. 2025, "Agentic Reasoning and Tool Integration for LLMs via RL"): answer
correctness plus a tool-execution term (fraction of tool calls that ran without error) plus a
format term. `artist_reward` adds the three with weights.
"""

from __future__ import annotations

import re

RETOOL_CAP = -0.6
RETOOL_STEP = 0.1

_THINK_ANSWER = re.compile(r"\s*<think>(?P<think>.+?)</think>\s*<answer>.+?</answer>\s*", re.DOTALL)


def retool_turns(tool_calls: int) -> int:
    """Chat turns of an episode with `tool_calls` interpreter calls: 2 + 2 * calls."""
    return 2 + 2 * tool_calls


def retool_shaping(score: float, turns: int) -> float:
    """ReTool's tool-call shaping of an outcome score (see the module docstring).

    Examples: (-1, 2) -> -1.0; (-1, 6) -> min(-0.6, -1 + 0.2) = -0.8; (-1, 12) -> -0.6;
    (1, 6) -> 1.
    """
    if score >= 0:
        return score
    return min(RETOOL_CAP, score + (turns - 2) / 2 * RETOOL_STEP)


def tool_success_reward(tool_calls: int, tool_errors: int, no_call_value: float = 0.0) -> float:
    """Fraction of tool calls that succeeded, (calls - errors) / calls; `no_call_value` when
    the episode made no call (ARTIST's tool-execution reward)."""
    if tool_calls < 0 or not 0 <= tool_errors <= tool_calls:
        raise ValueError(f"need 0 <= errors <= calls, got calls={tool_calls} errors={tool_errors}")
    if tool_calls == 0:
        return no_call_value
    return (tool_calls - tool_errors) / tool_calls


def think_answer_format_reward(text: str) -> float:
    """R1-style format reward: 1.0 if the text is `<think>...</think>` then
    `<answer>...</answer>` (each once, non-empty, nothing else around), else 0.0."""
    if any(text.count(tag) != 1 for tag in ("<think>", "</think>", "<answer>", "</answer>")):
        return 0.0
    match = _THINK_ANSWER.fullmatch(text)
    return float(match is not None and bool(match.group("think").strip()))


def tool_format_reward(tool_calls: int, invalid_actions: int) -> float:
    """Share of action turns that were well formed: calls / (calls + invalid); 1.0 when the
    episode had neither (a direct answer is well formed)."""
    total = tool_calls + invalid_actions
    return 1.0 if total == 0 else tool_calls / total


def artist_reward(
    correct: bool,
    tool_calls: int,
    tool_errors: int,
    well_formed: float,
    w_answer: float = 1.0,
    w_tool: float = 0.5,
    w_format: float = 0.2,
) -> float:
    """ARTIST: w_answer * correct + w_tool * tool_success + w_format * well_formed.

    `well_formed` in [0, 1] (e.g. `tool_format_reward`). With the defaults, a correct answer
    after 2 calls, 1 failed, all well formed: 1 + 0.5 * 0.5 + 0.2 * 1 = 1.45.
    """
    return (
        w_answer * float(correct)
        + w_tool * tool_success_reward(tool_calls, tool_errors)
        + w_format * float(well_formed)
    )

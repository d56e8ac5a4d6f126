"""ReTool shaping, ARTIST tool-success / format rewards: hand-computed values."""

import pytest

from agentic_rl.rewards.tool_use import (
    artist_reward,
    retool_shaping,
    retool_turns,
    think_answer_format_reward,
    tool_format_reward,
    tool_success_reward,
)


@pytest.mark.parametrize(
    ("score", "turns", "shaped"),
    [
        (-1.0, 2, -1.0),  # no tool call: no lift
        (-1.0, 4, -0.9),  # one call: -1 + (4 - 2) / 2 * 0.1
        (-1.0, 6, -0.8),
        (-1.0, 12, -0.6),  # -1 + 0.5 = -0.5, capped at -0.6
        (1.0, 12, 1.0),  # correct answers are never shaped
        (0.0, 8, 0.0),
    ],
)
def test_retool_shaping(score, turns, shaped):
    assert retool_shaping(score, turns) == pytest.approx(shaped)


def test_retool_turns_counts_messages():
    assert [retool_turns(k) for k in range(3)] == [2, 4, 6]


def test_tool_success_reward():
    assert tool_success_reward(4, 1) == 0.75
    assert tool_success_reward(0, 0) == 0.0
    assert tool_success_reward(0, 0, no_call_value=1.0) == 1.0
    with pytest.raises(ValueError):
        tool_success_reward(1, 2)


def test_format_rewards():
    assert think_answer_format_reward("<think>a</think>\n<answer>b</answer>") == 1.0
    assert think_answer_format_reward("<think> </think><answer>b</answer>") == 0.0
    assert think_answer_format_reward("<answer>b</answer>") == 0.0
    assert think_answer_format_reward("x <think>a</think><answer>b</answer>") == 0.0
    assert think_answer_format_reward("<think>a</think><answer>b</answer><answer>c</answer>") == 0.0
    assert tool_format_reward(3, 1) == 0.75
    assert tool_format_reward(0, 0) == 1.0


def test_artist_reward():
    # 1 * 1 + 0.5 * (1 / 2) + 0.2 * 1
    assert artist_reward(True, 2, 1, 1.0) == pytest.approx(1.45)
    assert artist_reward(False, 0, 0, 0.5) == pytest.approx(0.1)

"""Context budget: keep the prompt and the last k turns, cut the oldest observations first."""

import pytest

from agentic_rl.rollout.context import (
    Span,
    fit_context,
    make_span,
    protected_indices,
    spans_from_trajectory,
)
from agentic_rl.types import Trajectory

# prompt 4 | a1 3 | o1 6 | a2 2 | o2 5 | a3 2  = 22 tokens
PROMPT, A1, O1, A2, O2, A3 = (
    [1, 2, 3, 4],
    [10, 11, 12],
    [20, 21, 22, 23, 24, 25],
    [30, 31],
    [40, 41, 42, 43, 44],
    [50, 51],
)


def _trajectory() -> Trajectory:
    ids = PROMPT + A1 + O1 + A2 + O2 + A3
    mask = [0] * 4 + [1] * 3 + [0] * 6 + [1] * 2 + [0] * 5 + [1] * 2
    logprobs = [-0.5 if m else 0.0 for m in mask]
    return Trajectory(ids, mask, logprobs, prompt_length=4, turn_spans=[(4, 7), (13, 15), (20, 22)])


def _spans():
    t = _trajectory()
    return spans_from_trajectory(t.token_ids, t.loss_mask, t.logprobs, 4, t.turn_spans)


def test_spans_from_trajectory():
    spans = _spans()
    assert [s.kind for s in spans] == [
        "prompt", "action", "observation", "action", "observation", "action"
    ]  # fmt: skip
    assert [list(s.token_ids) for s in spans] == [PROMPT, A1, O1, A2, O2, A3]
    assert spans[1].loss_mask == (1, 1, 1) and spans[1].logprobs == (-0.5,) * 3
    assert spans[2].loss_mask == (0,) * 6
    # an observation after the last action becomes a trailing span
    tail = spans_from_trajectory([1, 2, 3, 4], [0, 1, 0, 0], [0, -1, 0, 0], 1, [(1, 2)])
    assert [s.kind for s in tail] == ["prompt", "action", "observation"]
    with pytest.raises(ValueError, match="out of order"):
        spans_from_trajectory([1, 2], [0, 1], [0, 0], 1, [(1, 5)])
    with pytest.raises(ValueError, match="differ"):
        Span("action", (1,), (1, 1), (0.0,))


def test_within_budget_nothing_changes():
    window = fit_context(_spans(), budget=22)
    assert window.token_ids == _trajectory().token_ids and window.fits
    assert window.dropped == window.truncated == [] and window.removed_tokens == 0


def test_truncate_the_oldest_observation_keeps_its_head():
    # budget 18: excess 4, o1 keeps 6 - 4 = 2 tokens
    window = fit_context(_spans(), budget=18, keep_last_turns=1, min_observation_tokens=2)
    assert window.token_ids == PROMPT + A1 + [20, 21] + A2 + O2 + A3
    assert window.loss_mask == [0] * 4 + [1] * 3 + [0] * 2 + [1] * 2 + [0] * 5 + [1] * 2
    assert window.logprobs == [-0.5 if m else 0.0 for m in window.loss_mask]
    assert window.truncated == [2] and window.dropped == [] and len(window) == 18
    assert window.removed_tokens == 4 and window.fits


def test_marker_and_minimum_turn_a_cut_into_a_drop():
    # with a 1-token marker o1 would keep 6 - 4 - 1 = 1 < 2 tokens: dropped, marker instead
    window = fit_context(
        _spans(), budget=18, keep_last_turns=1, marker_ids=[99], min_observation_tokens=2
    )
    assert window.token_ids == PROMPT + A1 + [99] + A2 + O2 + A3
    assert window.dropped == [2] and len(window) == 17
    assert window.loss_mask[7] == 0 and window.logprobs[7] == 0.0
    # a long enough observation is cut and marked: budget 19 -> o1 keeps 6 - 3 - 1 = 2
    cut = fit_context(
        _spans(), budget=19, keep_last_turns=1, marker_ids=[99], min_observation_tokens=2
    )
    assert cut.token_ids == PROMPT + A1 + [20, 21, 99] + A2 + O2 + A3 and len(cut) == 19


def test_drop_mode_and_the_last_turns_are_protected():
    window = fit_context(_spans(), budget=18, keep_last_turns=1, mode="drop")
    assert window.token_ids == PROMPT + A1 + A2 + O2 + A3 and len(window) == 16
    # keep_last_turns=2 protects a2, o2, a3: only o1 can go
    assert protected_indices(_spans(), 2) == {0, 3, 4, 5}
    two = fit_context(_spans(), budget=16, keep_last_turns=2, min_observation_tokens=2)
    assert two.token_ids == PROMPT + A1 + A2 + O2 + A3 and two.fits
    tight = fit_context(_spans(), budget=10, keep_last_turns=2)
    assert not tight.fits and tight.token_ids == PROMPT + A1 + A2 + O2 + A3


def test_old_actions_go_last_and_only_when_allowed():
    # budget 10, last turn protected: o1 (6) and o2 (5) dropped -> 11 tokens, still over
    over = fit_context(_spans(), budget=10, keep_last_turns=1)
    assert over.token_ids == PROMPT + A1 + A2 + A3 and not over.fits and over.dropped == [2, 4]
    # allowed to drop old actions: a1 (3) goes -> 8 tokens
    fit = fit_context(_spans(), budget=10, keep_last_turns=1, drop_old_actions=True)
    assert fit.token_ids == PROMPT + A2 + A3 and fit.fits and fit.dropped == [1, 2, 4]
    # the prompt is never cut
    bare = fit_context(_spans(), budget=2, keep_last_turns=0, drop_old_actions=True)
    assert bare.token_ids == PROMPT and not bare.fits


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        fit_context(_spans(), 10, mode="summarise")
    with pytest.raises(ValueError, match=">= 0"):
        fit_context(_spans(), -1)
    span = make_span("action", [5, 6])
    assert span.loss_mask == (1, 1) and make_span("observation", [7]).loss_mask == (0,)

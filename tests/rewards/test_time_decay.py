"""VLN-R1's time-decayed chunk reward, by hand."""

from __future__ import annotations

import pytest

from agentic_rl.rewards.time_decay import (
    decay_weights,
    normalized_time_decay_reward,
    time_decay_reward,
)


def test_decay_weights_by_hand():
    assert decay_weights(4, 0.5) == [1.0, 0.5, 0.25, 0.125]
    assert decay_weights(3, 1.0) == [1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="gamma"):
        decay_weights(3, 0.0)


def test_time_decay_reward_by_hand():
    # F F L vs F R L, gamma 0.5: 1 + 0 + 0.25
    assert time_decay_reward("FFL", "FRL", 0.5) == pytest.approx(1.25)
    # all six right, gamma 0.8: (1 - 0.8^6) / (1 - 0.8) = 3.68928
    assert time_decay_reward("FFLFFS", "FFLFFS", 0.8) == pytest.approx(3.68928)
    # a near mistake costs more than a far one: position 0 wrong vs position 5 wrong
    near = time_decay_reward("RFLFFS", "FFLFFS", 0.8)  # 3.68928 - 1
    far = time_decay_reward("FFLFFR", "FFLFFS", 0.8)  # 3.68928 - 0.8^5 = 3.68928 - 0.32768
    assert near == pytest.approx(2.68928) and far == pytest.approx(3.3616)
    # without decay both mistakes cost the same
    assert time_decay_reward("RFLFFS", "FFLFFS", 1.0) == time_decay_reward("FFLFFR", "FFLFFS", 1.0)


def test_positions_past_the_expert_stop_carry_nothing():
    # the expert stops after 3 actions: the predicted 4th-6th are never compared
    assert time_decay_reward("FFSxyz", "FFS", 0.5) == pytest.approx(1.75)
    assert time_decay_reward("", "FFS", 0.5) == 0.0


def test_normalized_time_decay_reward_by_hand():
    # F F L vs F R L, gamma 0.5: 1.25 / (1 + 0.5 + 0.25) = 0.714285...
    assert normalized_time_decay_reward("FFL", "FRL", 0.5) == pytest.approx(1.25 / 1.75)
    # the expert's own chunk scores 1 whatever its length; a lone wrong stop scores 0
    assert normalized_time_decay_reward("FFLFFS", "FFLFFS", 0.8) == pytest.approx(1.0)
    assert normalized_time_decay_reward("S", "S", 0.8) == pytest.approx(1.0)
    assert normalized_time_decay_reward("S", "FFS", 0.5) == 0.0
    # a chunk shorter than the expert's: the missing positions count as mismatches
    assert normalized_time_decay_reward("FF", "FFS", 0.5) == pytest.approx(1.5 / 1.75)
    assert normalized_time_decay_reward("FF", "", 0.5) == 0.0

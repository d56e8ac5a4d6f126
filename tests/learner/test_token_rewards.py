"""Where `collate` puts the step rewards: on each turn's last loss-mask-1 token."""

from __future__ import annotations

from agentic_rl.learner.batch import collate, reward_positions
from agentic_rl.types import Trajectory


def test_reward_positions_by_hand():
    mask = [0, 0, 1, 1, 0, 0, 0, 0]
    # the first turn ends in two inserted tokens; the second has no sampled token at all
    assert reward_positions([(2, 6), (6, 8)], mask) == [3, 3]
    assert reward_positions([(2, 4)], mask) == [3]
    assert reward_positions([(0, 2)], mask) == [None]  # nothing of the row trains
    assert reward_positions([], mask) == []


def row(step_rewards, reward):
    """Prompt [0, 2), one turn [2, 6) whose last two tokens were inserted (mask 0)."""
    return Trajectory(
        token_ids=[1, 2, 3, 4, 5, 6],
        loss_mask=[0, 0, 1, 1, 0, 0],
        logprobs=[0.0, 0.0, -0.5, -0.5, 0.0, 0.0],
        prompt_length=2,
        turn_spans=[(2, 6)],
        step_rewards=step_rewards,
        reward=reward,
        group_id="g",
    )


def test_a_turn_ending_in_inserted_tokens_keeps_its_reward():
    batch = collate([row([0.25], 0.25)], pad_token_id=0)
    assert batch.token_rewards[0].tolist() == [0.0, 0.0, 0.0, 0.25, 0.0, 0.0]


def test_the_episode_leftover_lands_on_the_last_trained_token():
    """A step sample of a longer episode: its own step reward plus the rest of the episode's
    return (the other samples' steps), both on token 3."""
    batch = collate([row([0.25], 1.0)], pad_token_id=0)
    assert batch.token_rewards[0].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]

"""VLN-R1's time-decayed reward (TDR) for a chunk of predicted actions.

VLN-R1 (Qi et al. 2025, "VLN-R1: Vision-Language Navigation via Reinforcement Fine-Tuning")
has the policy predict the next k actions at once and rewards the chunk by comparing it with
the ground-truth future actions, weighting near actions more than far ones:

    R = sum_{j=0}^{k-1} gamma^j * 1[a_{t+j} == a*_{t+j}]

with gamma in (0, 1] (exponential decay; the paper found it better than linear, uniform and
hard-cutoff weightings). A near mistake costs more than a far one because the far actions are
the ones most likely to be re-planned at the next chunk. gamma = 1 removes the decay (every
position counts the same).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


def decay_weights(k: int, gamma: float) -> list[float]:
    """The weights gamma^0, gamma^1, ..., gamma^(k-1) of a k-action chunk. [k]"""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    return [gamma**j for j in range(k)]


def time_decay_reward(
    predicted: Sequence[Hashable], expert: Sequence[Hashable], gamma: float
) -> float:
    """R = sum_j gamma^j 1[predicted_j == expert_j] over the positions both chunks have.

    predicted: [k] the policy's actions in order; expert: [m] the ground-truth next actions
    (m < k when the expert stops earlier: positions past its end are never executed, so they
    carry no reward). Example: predicted (F, F, L), expert (F, R, L), gamma 0.5 ->
    1 + 0 + 0.25 = 1.25."""
    weights = decay_weights(min(len(predicted), len(expert)), gamma)
    return float(sum(w for w, a, b in zip(weights, predicted, expert, strict=False) if a == b))


def normalized_time_decay_reward(
    predicted: Sequence[Hashable], expert: Sequence[Hashable], gamma: float
) -> float:
    """The chunk's TDR as a share of the most it can earn, TDR(predicted, expert) /
    TDR(expert, expert), in [0, 1]; 0 for an empty expert chunk.

    Missing predictions (a chunk shorter than the expert's) count as mismatches. On one state
    (VLN-R1's training sample) this is the TDR divided by a constant of the state, so GRPO's
    group-normalised advantages are unchanged; across the chunks of an episode it makes every
    chunk weigh the same, whatever the length of the expert's remaining path (navigation.py
    averages it over the episode's chunks). Example: predicted (F, F, L), expert (F, R, L),
    gamma 0.5 -> 1.25 / 1.75 = 0.714...; predicted (stop,), expert (F, F, stop), gamma 0.5 ->
    0 / 1.75 = 0."""
    best = time_decay_reward(expert, expert, gamma)
    return time_decay_reward(predicted, expert, gamma) / best if best > 0 else 0.0

"""Advantages grouped per agent role (multi-agent envs, algo.role_groups).

In a multi-agent episode every role writes several samples (one per conversation). MATPO's rule
(the default) gives all of them the episode's group advantage. Grouped per role, each role is
its own learner: the unit is an (episode, role) pair, its reward is the role's reward in that
episode (the team's outcome plus the role's own reward terms, the same on every sample of the
role in the episode), and units are compared within (task group x role), the bucket of the
group's episodes in which that role acted, with the estimator's own group formula (GRPO's
(R - mean) / std, Dr. GRPO's R - mean, RLOO's leave-one-out). A role that did not act in an
episode is absent from its bucket (never a zero reward).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from agentic_rl.algos.advantages import episode_rows


def role_group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    agent_ids: Tensor,
    episode_index: Tensor,
    estimate: Callable[[Tensor, Tensor], Tensor],
) -> Tensor:
    """Per-role group advantage of every row.

    Unit ``u = (e, k)``: episode ``e``'s samples written by role ``k``, with reward ``R_u``
    (the reward of its first row; the rows of a unit share it). Bucket ``b(u) = (g(e), k)``.
    ``A_u = estimate(R, b)[u]``, e.g. GRPO: ``(R_u - mean_{b(u)} R) / (std_{b(u)} R + eps)``;
    every row of unit ``u`` gets ``A_u``. Example (GRPO, one task group, two episodes):
    solver rewards 1 and 0 -> +-0.707; verifier rewards 2 and 2 -> 0 for both.
    Shapes: ``rewards``, ``group_ids``, ``agent_ids``, ``episode_index`` ``[N]`` -> ``[N]``.
    """
    if len(rewards) == 0:
        return rewards.detach().clone()
    unit, first, bucket = role_units(episode_index, group_ids, agent_ids)
    return estimate(rewards.detach()[first], bucket)[unit]


def role_units(
    episode_index: Tensor, group_ids: Tensor, agent_ids: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """The units a role is credited in, and the buckets they are compared in.

    A unit is an episode, whose samples may be spread over several rows (``episode_index``);
    with ``agent_ids`` (a multi-agent episode) it is one role's samples in the episode, the
    pair ``(e, k)``, compared within the bucket ``(task group, k)``. Per-role group advantages
    (`role_group_advantages`) and the turn-level estimators (algos/estimators.py: turn ``j`` of
    a unit is always that role's ``j``-th turn, never another agent's, as MATPO / ReMA give
    each role its own trajectory) both read them.
    E.g. ``episode_index`` ``[0, 0, 0, 1]``, ``agent_ids`` ``[0, 1, 0, 1]``, ``group_ids``
    ``[3, 3, 3, 3]`` -> units ``(0, 0), (0, 1), (0, 0), (1, 1)``: ``inverse`` ``[0, 1, 0, 2]``,
    ``first`` ``[0, 1, 3]`` and the units' groups ``[6, 7, 7]`` (group x roles + role).
    Shapes: ``[N]`` long each -> ``inverse`` ``[N]`` (each row's unit, numbered ``0..U-1``),
    ``first`` ``[U]`` (each unit's first row), ``groups`` ``[U]`` long.
    """
    if agent_ids is not None and len(agent_ids):
        roles = int(agent_ids.max()) + 1
        episode_index = episode_index.long() * roles + agent_ids.long()
        group_ids = group_ids.long() * roles + agent_ids.long()
    inverse, first = episode_rows(episode_index)
    return inverse, first, group_ids[first]

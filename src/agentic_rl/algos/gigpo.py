"""GiGPO: Group-in-Group Policy Optimization (Feng et al. 2025, "Group-in-Group Policy
Optimization for LLM Agent Training", reference code: verl-agent ``gigpo/core_gigpo.py``).

GiGPO trains step-wise: every environment step of every episode is its own sample. Inputs are
these flattened STEP samples, ``N`` of them. ``group_ids`` ``[N]`` is the episode group of each
step sample (the episodes of one task, started from the same initial state); a step group
(anchor-state group) collects the steps of one episode group that saw the same observation.

``A = A_E + omega * A_S`` with
  * episode advantage ``A_E = (R(tau) - mean_group R) / F_norm`` (Eq. 3),
  * step advantage ``A_S = (R_t - mean_stepgroup R_t) / F_norm`` (Eq. 7) on the discounted
    step return ``R_t = sum_{k >= t} gamma^{k-t} r_k`` (Eq. 5, gamma = 0.95),
and ``F_norm = std`` (``"mean_std_norm"``, unbiased std + eps) or ``1`` (``"mean_norm"``).
As in :mod:`agentic_rl.algos.advantages`, singleton and constant groups give exactly 0.

Every function detaches its inputs; nothing here has autograd history.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from difflib import SequenceMatcher

import torch
from torch import Tensor

from agentic_rl.algos.advantages import grpo_advantages

GIGPO_NORMS = ("mean_std_norm", "mean_norm")


def _group_normalised(values: Tensor, ids: Tensor, norm: str, eps: float) -> Tensor:
    if norm not in GIGPO_NORMS:
        raise ValueError(f"unknown GiGPO norm {norm!r}; expected one of {GIGPO_NORMS}")
    return grpo_advantages(
        torch.as_tensor(values), torch.as_tensor(ids), eps=eps, scale_by_std=norm == "mean_std_norm"
    )


def episode_advantages(
    episode_rewards: Tensor,
    group_ids: Tensor,
    norm: str = "mean_std_norm",
    eps: float = 1e-6,
) -> Tensor:
    """Episode-level relative advantage of GiGPO (Eq. 3).

    ``A_E,i = (R_i - mean_g(R)) / F_norm`` with ``F_norm = std_g(R) + eps`` (unbiased std) for
    ``norm="mean_std_norm"`` or ``1`` for ``"mean_norm"``, over the step samples of episode
    group ``g``: each step sample carries its episode's return ``R_i``, so the group statistics
    weigh each episode by its number of steps (verl-agent's default,
    ``compute_mean_std_cross_steps=True``). For per-episode statistics pass one entry per
    episode and broadcast the result. Singleton and constant groups get exactly 0 (verl-agent
    returns ``R_i`` itself for a singleton group).
    Shapes: ``episode_rewards`` ``[N]``, ``group_ids`` ``[N]`` long -> ``[N]``.
    Raises ValueError on an unknown ``norm``.
    """
    return _group_normalised(episode_rewards, group_ids, norm, eps)


def discounted_step_returns(
    step_rewards: Sequence[Sequence[float]], gamma: float = 0.95
) -> list[list[float]]:
    """Discounted return of every step of every episode (GiGPO Eq. 5).

    ``R_t = sum_{k >= t} gamma^{k-t} r_k = r_t + gamma * R_{t+1}``, computed backwards per
    episode. Input: one list of per-step rewards per episode; output has the same ragged shape.
    """
    returns = []
    for episode in step_rewards:
        running = 0.0
        out = [0.0] * len(episode)
        for t in reversed(range(len(episode))):
            running = float(episode[t]) + gamma * running
            out[t] = running
        returns.append(out)
    return returns


def _similar(anchor: Hashable, representative: Hashable, threshold: float) -> bool:
    if not isinstance(anchor, str) or not isinstance(representative, str):
        return False
    matcher = SequenceMatcher(None, anchor, representative)
    # real_quick_ratio >= quick_ratio >= ratio are upper bounds: cheap early rejection only.
    return (
        matcher.real_quick_ratio() >= threshold
        and matcher.quick_ratio() >= threshold
        and matcher.ratio() >= threshold
    )


def anchor_groups(
    anchors: Sequence[Hashable],
    group_ids: Sequence[Hashable],
    similarity_threshold: float | None = None,
) -> list[int]:
    """Anchor-state step groups of GiGPO (Eq. 6): one step-group id per step sample.

    Step samples of the same episode group whose anchor (the observation the step acted on)
    is identical share a step group; samples of different episode groups never do. With
    ``similarity_threshold`` (e.g. 0.95; verl-agent's similarity-based GiGPO), a string anchor
    also joins the first existing step group of its episode group whose FIRST member's anchor
    ``rep`` gives ``difflib.SequenceMatcher(None, anchor, rep).ratio() >= threshold`` (the
    argument order and default ``autojunk`` of verl-agent's ``are_similar``). Identical anchors
    always share a group; non-string anchors match only exactly. Greedy, in sample order, so
    the result is deterministic. Ids are dense ``0..K-1`` in order of first appearance.
    Shapes: ``anchors`` ``[N]``, ``group_ids`` ``[N]`` -> ``list[int]`` of length ``N``.
    Raises ValueError on mismatched lengths or a threshold outside ``(0, 1]``.
    """
    if len(anchors) != len(group_ids):
        raise ValueError(f"{len(anchors)} anchors but {len(group_ids)} group ids")
    if similarity_threshold is not None and not 0.0 < similarity_threshold <= 1.0:
        raise ValueError(f"similarity_threshold must be in (0, 1], got {similarity_threshold}")
    exact: dict[tuple[Hashable, Hashable], int] = {}
    # Per episode group: (representative anchor, step-group id) in creation order.
    representatives: dict[Hashable, list[tuple[Hashable, int]]] = {}
    out: list[int] = []
    num_groups = 0
    for anchor, group in zip(anchors, group_ids, strict=True):
        step_group = exact.get((group, anchor))
        if step_group is None and similarity_threshold is not None:
            for rep, rep_id in representatives.get(group, []):
                if _similar(anchor, rep, similarity_threshold):
                    step_group = rep_id
                    break
        if step_group is None:
            step_group = num_groups
            num_groups += 1
            representatives.setdefault(group, []).append((anchor, step_group))
        exact.setdefault((group, anchor), step_group)
        out.append(step_group)
    return out


def step_advantages(
    step_returns: Tensor,
    step_group_ids: Tensor,
    norm: str = "mean_std_norm",
    eps: float = 1e-6,
) -> Tensor:
    """Step-level relative advantage of GiGPO (Eq. 7).

    ``A_S,i = (R_t,i - mean_s(R_t)) / F_norm`` over the step group ``s`` of sample ``i``
    (see :func:`anchor_groups`), ``F_norm = std_s + eps`` (unbiased) or 1 as in
    :func:`episode_advantages`. Singleton step groups (no other episode visited the state) and
    constant ones get exactly 0.
    Shapes: ``step_returns`` ``[N]``, ``step_group_ids`` ``[N]`` long -> ``[N]``.
    Raises ValueError on an unknown ``norm``.
    """
    return _group_normalised(step_returns, step_group_ids, norm, eps)


def gigpo_advantages(
    episode_rewards_per_step: Tensor,
    group_ids: Tensor,
    step_returns: Tensor,
    step_group_ids: Tensor,
    omega: float = 1.0,
    norm: str = "mean_std_norm",
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO advantage (Eq. 8): ``A_i = A_E,i + omega * A_S,i`` (omega = 1 in the paper).

    ``A_E`` from :func:`episode_advantages` on the episode return carried by each step sample,
    ``A_S`` from :func:`step_advantages` on the discounted step returns; both with ``norm``.
    The result is one scalar per step sample, broadcast to its tokens by the trainer (e.g. with
    :func:`agentic_rl.algos.advantages.outcome_to_token_advantages`).
    Shapes: all inputs ``[N]`` -> ``[N]``. Raises ValueError on an unknown ``norm``.
    """
    a_e = episode_advantages(episode_rewards_per_step, group_ids, norm, eps)
    a_s = step_advantages(step_returns, step_group_ids, norm, eps)
    return a_e + omega * a_s.to(a_e.dtype)

"""Pure batch filters: which samples / groups of a rollout batch to train on.

Shapes: ``B`` samples; ``group_ids`` ``[B]`` long (samples of one prompt share an id; ids need
not be contiguous or sorted). Index-returning filters give a LongTensor of kept sample indices
in ascending (batch) order, so ``batch[kept]`` preserves the original order. No randomness
unless a ``torch.Generator`` is passed; no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from agentic_rl.algos.advantages import _group_stats

# rStar2-Agent: p_err of a trajectory without any tool call.
NO_TOOL_CALL_ERROR_PENALTY = 0.5


def dynamic_sampling_keep(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic sampling (Yu et al. 2025, "DAPO", Eq. 11 constraint ``0 < #correct < G``).

    Keep the samples of every group whose rewards are not all equal; a group whose spread is
    ``<= 1e-6 * max(1, |mean|)`` counts as constant, the same tolerance under which the group
    advantage estimators return exactly 0 (see :mod:`agentic_rl.algos.advantages`). Singleton
    groups are constant by definition and dropped. The caller generates more groups until the
    batch is full. Shapes: ``rewards`` ``[B]``, ``group_ids`` ``[B]`` -> kept indices ``[K]`` long.
    """
    stats = _group_stats(rewards, group_ids)
    return torch.nonzero(~stats.degenerate[stats.inverse]).flatten()


def useful_group_fraction(rewards: Tensor, group_ids: Tensor) -> float:
    """Share of groups that dynamic sampling keeps (non-constant, >= 2 samples); 0.0 if empty.

    ``#{g : not degenerate(g)} / #groups``. Shapes: ``[B]``, ``[B]`` -> float.
    """
    if group_ids.numel() == 0:
        return 0.0
    stats = _group_stats(rewards, group_ids)
    return float((~stats.degenerate).sum().item() / stats.degenerate.numel())


def reward_variance_keep(rewards: Tensor, group_ids: Tensor, keep_fraction: float = 0.25) -> Tensor:
    """StarPO-S variance-based trajectory filtering (Wang et al. 2025, "RAGEN").

    Keep the samples of the ``ceil(keep_fraction * num_groups)`` groups with the highest reward
    std (unbiased, as ``torch.std``; 0 for a singleton group); ties are broken by first
    appearance of the group in the batch. Low-variance groups carry little learning signal;
    RAGEN keeps the top 25%. Constant groups are kept only when too few groups vary.
    Shapes: ``rewards`` ``[B]``, ``group_ids`` ``[B]`` -> kept indices ``[K]`` long.
    Raises ValueError unless ``0 < keep_fraction <= 1``.
    """
    if not 0.0 < keep_fraction <= 1.0:
        raise ValueError(f"keep_fraction must be in (0, 1], got {keep_fraction}")
    stats = _group_stats(rewards, group_ids)
    n_groups = stats.counts.numel()
    centered = stats.rewards - stats.mean[stats.inverse]
    sq = torch.zeros_like(stats.mean).index_add_(0, stats.inverse, centered**2)
    std = (sq / (stats.counts - 1).clamp_min(1)).sqrt()
    positions = torch.arange(group_ids.numel(), device=group_ids.device)
    first = torch.full((n_groups,), group_ids.numel(), device=group_ids.device)
    first = first.scatter_reduce(0, stats.inverse, positions, "amin")
    by_appearance = torch.argsort(first)
    order = torch.sort(-std[by_appearance], stable=True).indices
    top = by_appearance[order[: math.ceil(keep_fraction * n_groups)]]
    keep_group = torch.zeros(n_groups, dtype=torch.bool, device=group_ids.device)
    keep_group[top] = True
    return torch.nonzero(keep_group[stats.inverse]).flatten()


def roc_penalties(
    tool_error_fractions: Tensor,
    answer_tag_count: Tensor,
    assistant_turns: Tensor,
    answer_tags_balanced: Tensor,
) -> Tensor:
    """Trajectory penalty of GRPO-RoC (Shang et al. 2025, "rStar2-Agent"): ``p = p_err + p_format``.

    Arguments, one entry per trajectory:
      * ``tool_error_fractions``: errored tool responses / tool responses (in ``[0, 1]``); NaN
        marks a trajectory without any tool call, which gets ``p_err = 0.5``.
      * ``answer_tag_count``: number of complete answer blocks (e.g. ``<answer>...</answer>``)
        in the trajectory.
      * ``assistant_turns``: number of assistant turns (clamped to >= 1).
      * ``answer_tags_balanced``: False if the answer open/close tags do not pair up.
    ``p_err`` = the tool error share (0.5 without tool calls);
    ``p_format = 1`` if there is no answer or the tags are unbalanced, else
    ``min((#answers - 1) / #turns, 1)`` (repeated answers are penalised).
    So ``p`` lies in ``[0, 2]``; it only ranks positive trajectories (:func:`roc_downsample`),
    the reward itself stays 1/0. Shapes: all ``[B]`` -> ``[B]`` float.
    """
    err = tool_error_fractions.detach()
    err = err.to(torch.promote_types(err.dtype, torch.float32))
    p_err = torch.where(torch.isnan(err), NO_TOOL_CALL_ERROR_PENALTY, err)
    answers = answer_tag_count.detach().to(p_err.dtype)
    turns = assistant_turns.detach().to(p_err.dtype).clamp_min(1)
    repeated = ((answers - 1) / turns).clamp(max=1.0)
    bad_format = (answers < 1) | ~answer_tags_balanced.bool()
    p_format = torch.where(bad_format, 1.0, repeated)
    return p_err + p_format


def roc_downsample(
    rewards: Tensor,
    penalties: Tensor,
    group_size_out: int,
    min_per_class: int = 2,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Resample-on-Correct down-sampling of ONE oversampled group (rStar2-Agent, GRPO-RoC).

    From ``N`` (= 2G) rollouts keep ``M = min(group_size_out, N)``. Positives: ``reward > 0``
    (reward 1/0); negatives: the rest. Class sizes keep the group's proportions:
    ``k_pos = round_half_up(M * n_pos / N)`` (integer arithmetic, ``(2 M n_pos + N) // 2N``),
    then clamped so each class keeps ``>= min(min_per_class, its size)``; ``k_neg = M - k_pos``.
    Positives are sorted by ascending penalty (stable: equal penalties keep batch order) and
    the ``k_pos`` cleanest kept. Negatives keep their variety: without ``generator`` the first
    ``k_neg`` in batch order; with one, ``k_neg`` drawn uniformly without replacement (as in the
    paper). Drop equal-reward groups before (:func:`dynamic_sampling_keep`); a group with one
    class only keeps ``M`` of that class.
    Shapes: ``rewards``, ``penalties`` ``[N]`` -> kept indices ``[M]`` long, ascending.
    Raises ValueError on a negative size, or if both class minimums do not fit in ``M``.
    """
    if min_per_class < 0 or group_size_out < 0:
        raise ValueError(f"negative size: {group_size_out=}, {min_per_class=}")
    n = rewards.numel()
    keep = min(group_size_out, n)
    positive = rewards.detach() > 0
    pos_idx = torch.nonzero(positive).flatten()
    neg_idx = torch.nonzero(~positive).flatten()
    n_pos, n_neg = pos_idx.numel(), neg_idx.numel()
    lo_pos, lo_neg = min(min_per_class, n_pos), min(min_per_class, n_neg)
    if lo_pos + lo_neg > keep:
        raise ValueError(
            f"cannot keep {lo_pos} positives and {lo_neg} negatives in a group of {keep}"
        )
    k_pos = (2 * keep * n_pos + n) // (2 * n) if n else 0
    k_pos = min(max(k_pos, lo_pos), keep - lo_neg)
    k_neg = keep - k_pos
    cleanest = torch.sort(penalties.detach()[pos_idx], stable=True).indices[:k_pos]
    if generator is None:
        chosen_neg = neg_idx[:k_neg]
    else:
        perm = torch.randperm(n_neg, generator=generator, device=generator.device)
        chosen_neg = neg_idx[perm.to(neg_idx.device)[:k_neg]]
    return torch.sort(torch.cat([pos_idx[cleanest], chosen_neg])).values


def majority_vote(answers: Sequence[str | None]) -> tuple[str | None, float]:
    """TTRL pseudo-label (Zuo et al. 2025, "TTRL: Test-Time Reinforcement Learning").

    The most frequent non-None answer and its vote share ``count / len(answers)`` (samples
    without an extractable answer count in the denominator but do not vote, so a prompt the
    model mostly fails to answer yields a low-confidence label). Ties go to the answer seen
    first. ``(None, 0.0)`` when nothing voted. Answers are compared as given: normalise them
    (e.g. math-equivalence canonical form) before calling.
    """
    counts = Counter(a for a in answers if a is not None)
    best: str | None = None
    for answer, count in counts.items():  # insertion order = first appearance
        if best is None or count > counts[best]:
            best = answer
    if best is None:
        return None, 0.0
    return best, counts[best] / len(answers)


def majority_vote_rewards(answers: Sequence[str | None], label: str | None) -> list[float]:
    """TTRL reward: ``1.0`` if an answer equals the pseudo-label, else ``0.0``.

    A None answer or a None label always gives 0.
    """
    return [1.0 if label is not None and a == label else 0.0 for a in answers]

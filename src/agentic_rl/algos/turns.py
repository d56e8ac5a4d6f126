"""Turn-level credit for multi-turn episodes: MT-GRPO's turn advantages and a turn-level GAE.

A multi-turn episode earns step rewards turn by turn (a search that found the page, a valid
move) and an outcome at the end. Episode-level GRPO spreads one outcome advantage over every
turn; these estimators give each turn its own credit.

Shapes: ``B`` rows (episodes), ``K`` turns (padded; ``turn_mask`` ``[B, K]`` is 1 on the turns
an episode has), ``T`` tokens. ``turn_ids`` ``[B, T]`` long holds, for each token, the index of
the model turn it belongs to and ``-1`` on tokens of no turn (the prompt, observations,
padding). Like :mod:`agentic_rl.algos.advantages`, every function detaches its inputs and
gives exactly 0 to a group whose values are all equal.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algos.advantages import grpo_advantages
from agentic_rl.algos.masked import as_bool_mask


def turn_group_advantages(
    turn_rewards: Tensor, turn_mask: Tensor, group_ids: Tensor, eps: float = 1e-6
) -> Tensor:
    """Turn-level group advantages: turn ``k``'s reward normalised over the group's turns ``k``.

    ``A^T_{i,k} = (r_{i,k} - mean_{j in g, k < K_j}(r_{j,k})) / (std(...) + eps)``: the GRPO
    advantage (:func:`grpo_advantages`) of the ``k``-th turn's reward among the episodes of
    the group that reached a ``k``-th turn (MT-GRPO, Zeng et al. 2025, arXiv 2505.11821, which
    normalises the turn reward over the group). A turn index that only one episode of the group
    reached, or whose rewards are all equal, gets exactly 0; turns an episode does not have
    are 0.

    Shapes: ``turn_rewards`` ``[B, K]``, ``turn_mask`` ``[B, K]``, ``group_ids`` ``[B]`` ->
    ``[B, K]``.
    """
    present = as_bool_mask(turn_mask)
    num_turns = turn_rewards.shape[1]
    rows, turns = present.nonzero(as_tuple=True)
    out = torch.zeros(turn_rewards.shape, dtype=torch.float32)
    if rows.numel() == 0:
        return out
    # One GRPO group per (task group, turn index): ids that cannot collide across turn indices.
    dense_groups = torch.unique(group_ids, return_inverse=True)[1]
    ids = dense_groups[rows] * num_turns + turns
    adv = grpo_advantages(turn_rewards.detach()[rows, turns].float(), ids, eps=eps)
    out[rows, turns] = adv
    return out


def mt_grpo_token_advantages(
    outcome_adv: Tensor,
    turn_adv: Tensor,
    turn_ids: Tensor,
    mask: Tensor,
    last_turn: Tensor,
    turn_coef: float = 1.0,
) -> Tensor:
    """MT-GRPO's token advantages: outcome credit everywhere, turn credit on the turns before
    the last.

    ``A_t = A^O_i + turn_coef * A^T_{i,k(t)}`` for a token of turn ``k(t) < last_turn_i`` and
    ``A_t = A^O_i`` on the last turn. In MT-GRPO's two-turn setting (a tool call, then the
    answer) this is the paper's rule: tokens before the first tool result get
    ``A^O + lambda * A^T`` and later tokens ``A^O`` (``turn_advantage_coef``, default 1.0).
    With more turns every turn before the last adds its own turn advantage; the last turn's
    reward is the outcome, which ``A^O`` already credits, so it is not counted twice.

    Shapes: ``outcome_adv`` ``[B]``, ``turn_adv`` ``[B, K]``, ``turn_ids`` ``[B, T]`` long (-1
    off turns), ``mask`` ``[B, T]``, ``last_turn`` ``[B]`` long (index of each row's last
    turn) -> ``[B, T]``, 0 where ``mask`` is 0.
    """
    m = as_bool_mask(mask)
    k = turn_ids.clamp_min(0)
    per_token_turn = turn_adv.detach().float().gather(1, k)
    earlier = (turn_ids >= 0) & (turn_ids < last_turn[:, None])
    adv = outcome_adv.detach().float()[:, None] + turn_coef * torch.where(
        earlier, per_token_turn, 0
    )
    return torch.where(m, adv, 0)


def last_turn_rewards(turn_rewards: Tensor, num_turns: Tensor, rewards: Tensor) -> Tensor:
    """Each episode's outcome reward apart from its intermediate turns' step rewards: the reward
    of its last turn (that turn's step reward plus what reward functions add after the
    rollout, which `turn_tensors` puts there), ``R^O_i = r_{i, K_i - 1}``; an episode without
    a turn keeps its episode reward. MT-GRPO (Zeng et al. 2025, arXiv 2505.11821) normalises
    such an outcome-only reward; the episode reward is the sum of every turn's reward.

    Shapes: ``turn_rewards`` ``[B, K]``, ``num_turns`` ``[B]`` long, ``rewards`` ``[B]`` ->
    ``[B]``.
    """
    last = (num_turns - 1).clamp_min(0)[:, None]
    at_last = turn_rewards.detach().float().gather(1, last)[:, 0]
    return torch.where(num_turns > 0, at_last, rewards.detach().float())


def turn_gae(
    turn_rewards: Tensor,
    turn_values: Tensor,
    turn_mask: Tensor,
    gamma: float = 0.99,
    lam: float = 0.9,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over turns (a turn-level critic, as Turn-PPO).

    The turn is the action: ``delta_k = r_k + gamma * V_{k+1} - V_k`` and
    ``A_k = delta_k + gamma * lam * A_{k+1}``, with ``V`` and ``A`` after an episode's last
    turn 0 (Schulman et al. 2016, applied at the granularity of turns: the state is the
    history up to the turn, the action the whole message). ``returns_k = A_k + V_k`` are the
    critic's targets. Every token of turn ``k`` then takes ``A_k``
    (:func:`turn_to_token_advantages`).

    Shapes: ``turn_rewards``, ``turn_values``, ``turn_mask`` ``[B, K]`` (turns of a row are a
    prefix of its K slots) -> ``(advantages [B, K], returns [B, K])``, 0 on absent turns.
    """
    present = as_bool_mask(turn_mask)
    r = torch.where(present, turn_rewards.detach().float(), 0)
    v = torch.where(present, turn_values.detach().float(), 0)
    adv = torch.zeros_like(r)
    next_adv = r.new_zeros(r.shape[0])
    next_value = r.new_zeros(r.shape[0])
    for k in reversed(range(r.shape[1])):
        delta = r[:, k] + gamma * next_value - v[:, k]
        adv_k = delta + gamma * lam * next_adv
        adv[:, k] = torch.where(present[:, k], adv_k, 0)
        next_adv = torch.where(present[:, k], adv_k, 0)
        next_value = torch.where(present[:, k], v[:, k], 0)
    return adv, torch.where(present, adv + v, 0)


def turn_sums(token_values: Tensor, turn_ids: Tensor, width: int) -> Tensor:
    """Each turn's sum of a per-token quantity: ``S_{b,k} = sum_{t: turn_ids[b,t] = k} x_{b,t}``
    (tokens of no turn, ``-1``, count nowhere). Turn-PPO with the KL in the reward subtracts
    ``kl_coef * S`` of the per-token KL from each turn's reward, as token-level PPO subtracts it
    from each token's.

    Shapes: ``token_values`` ``[B, T]`` (0 off the mask), ``turn_ids`` ``[B, T]`` long ->
    ``[B, width]``.
    """
    x = token_values.detach().float()
    on = turn_ids >= 0
    out = torch.zeros((x.shape[0], width), dtype=x.dtype, device=x.device)
    return out.scatter_add(1, turn_ids.clamp_min(0), torch.where(on, x, 0))


def turn_to_token_advantages(turn_adv: Tensor, turn_ids: Tensor, mask: Tensor) -> Tensor:
    """Give every token of turn ``k`` the turn's advantage ``A_k``.

    Shapes: ``turn_adv`` ``[B, K]``, ``turn_ids`` ``[B, T]`` long (-1 off turns), ``mask``
    ``[B, T]`` -> ``[B, T]``, 0 where ``mask`` is 0 or the token belongs to no turn.
    """
    m = as_bool_mask(mask) & (turn_ids >= 0)
    per_token = turn_adv.detach().float().gather(1, turn_ids.clamp_min(0))
    return torch.where(m, per_token, 0)


def turn_slots(num_turns: Tensor, width: int) -> Tensor:
    """Which of the ``K = width`` turn slots a row has: ``slot k < num_turns_i``.

    Shapes: ``num_turns`` ``[B]`` long -> ``[B, K]`` bool.
    """
    return torch.arange(width, device=num_turns.device)[None, :] < num_turns[:, None]


def turn_start_mask(turn_ids: Tensor, mask: Tensor) -> Tensor:
    """The first trained token of each turn: where a turn-level critic reads the turn's value.

    The value of token ``t`` is read from the state that predicts ``t`` (the project's critic
    convention), so the value at a turn's first token is ``V(history before the turn)``: the
    state of the turn-level MDP, whose action is the whole turn (Turn-PPO). A turn none of
    whose tokens trains (all inserted, or masked out) has no start.

    Shapes: ``turn_ids`` ``[B, T]`` long (-1 off turns), ``mask`` ``[B, T]`` -> ``[B, T]``
    bool. E.g. ids ``[-1, 0, 0, -1, 1, 1]``, mask ``[0, 0, 1, 0, 1, 1]`` ->
    ``[F, F, T, F, T, F]``.
    """
    trained = as_bool_mask(mask) & (turn_ids >= 0)
    width = int(turn_ids.max()) + 1 if turn_ids.numel() else 0
    if width <= 0:
        return torch.zeros(turn_ids.shape, dtype=torch.bool, device=turn_ids.device)
    slots = torch.arange(width, device=turn_ids.device)
    of_turn = (turn_ids[..., None] == slots) & trained[..., None]  # [B, T, K]
    first = of_turn & (of_turn.long().cumsum(dim=1) == 1)
    return first.any(dim=-1)


def turn_values(values: Tensor, turn_ids: Tensor, starts: Tensor, width: int) -> Tensor:
    """Each turn's value ``V_k``: the per-token value at the turn's start
    (:func:`turn_start_mask`); 0 for a turn without one.

    Shapes: ``values`` ``[B, T]``, ``turn_ids`` ``[B, T]`` long, ``starts`` ``[B, T]`` bool,
    ``width`` = ``K`` -> ``[B, K]``.
    """
    out = torch.zeros((values.shape[0], width), dtype=torch.float32, device=values.device)
    rows, cols = starts.nonzero(as_tuple=True)
    out[rows, turn_ids[rows, cols]] = values.detach().float()[rows, cols]
    return out

"""Credit and branching for tree-shaped rollouts (Tree-GRPO, ARPO).

Instead of G independent episodes per task, a tree rollout branches episodes at chosen points
and shares the prefix. Two pieces of the math are pure and live here:

- Tree-GRPO's advantage of a leaf, relative to the leaves of its own tree and to every leaf of
  the task (:func:`tree_grpo_advantages`), and the reference code's three other estimators:
  sequential normalisation (:func:`tree_2norm_advantages`), the intra-tree term alone
  (:func:`tree_inner_advantages`) and both terms normalised over tokens
  (:func:`tree_per_token_advantages`, over :func:`response_span`);
- ARPO's branching rule: branch after a tool result when the policy's entropy rose
  (:func:`arpo_turn_entropy`, :func:`arpo_branch`, and the budget over a step's branch points,
  :func:`arpo_copies`; rollout/tree.py plays it with rollout.tree.branch=entropy).
  :func:`normalised_topk_entropy` is the top-k form, a mean over tokens, for a backend that
  returns only top-k logprobs; no rollout uses it (the HF generator gives whole entropies).

The Tree-GRPO estimators follow the authors' released code (``AMAP-ML/Tree-GRPO``,
``verl/trainer/ppo/ray_trainer_ts.py`` ``compute_advantage``, ``adv_estimator`` = ``tree``,
``tree_2norm``, ``tree_inner``, ``tree_per_token``, over the normalisations of
``verl/trainer/ppo/core_algos.py``). There every statistic is a mean and an unbiased std with
``eps = 1e-6``; a singleton group is normalised with mean 0 and std 1 (its raw value is kept),
where :func:`grpo_advantages` gives 0. Here the group rule is :func:`grpo_advantages`'s
(exactly 0 for a singleton or constant group), except in the second pass of
:func:`tree_2norm_advantages` (see there). Every tree of a branch=random rollout has at least
two leaves (config validation), so singletons arise only from ARPO's trees and from leaves
lost to infrastructure failures.

Shapes: ``B`` leaves (rows), ``T`` tokens, ``N`` / ``C`` candidate branch points, ``k`` top-k
logprobs.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from agentic_rl.algos.advantages import grpo_advantages
from agentic_rl.algos.masked import as_bool_mask


def tree_grpo_advantages(
    rewards: Tensor, group_ids: Tensor, tree_ids: Tensor, eps: float = 1e-6
) -> Tensor:
    """Tree-GRPO's leaf advantage: ``A = A_inter + A_intra`` (Ji et al. 2025, arXiv 2509.21240).

    ``A_inter_i = GRPO(R)_i`` over every leaf of the task (the ``group_ids`` group: all of the
    task's trees together) and ``A_intra_i = GRPO(R)_i`` over the leaves of leaf ``i``'s own
    tree (``tree_ids``), each ``(R_i - mean) / (std + eps)`` with the unbiased std, and exactly
    0 for a constant or singleton group (:func:`grpo_advantages`). The intra-tree term compares
    leaves that share a prefix, so it credits the steps after the branch point; the inter-tree
    term is GRPO's outcome advantage. Tree ids must be unique across tasks.

    Shapes: ``rewards``, ``group_ids``, ``tree_ids`` ``[B]`` -> ``[B]``.
    """
    return grpo_advantages(rewards, group_ids, eps=eps) + grpo_advantages(
        rewards, tree_ids, eps=eps
    )


def tree_inner_advantages(rewards: Tensor, tree_ids: Tensor, eps: float = 1e-6) -> Tensor:
    """The intra-tree term alone: ``A_i = (R_i - mean_tree R) / (std_tree R + eps)`` over the
    leaves of leaf ``i``'s tree (the reference code's ``tree_inner``), GRPO with each tree as
    its group. Leaves of different trees of one task are never compared: only what differs
    after a shared prefix is credited, and a tree whose leaves all scored alike gets 0 however
    the task's other trees did.

    Shapes: ``rewards``, ``tree_ids`` ``[B]`` -> ``[B]``.
    """
    return grpo_advantages(rewards, tree_ids, eps=eps)


def tree_2norm_advantages(
    rewards: Tensor, group_ids: Tensor, tree_ids: Tensor, eps: float = 1e-6
) -> Tensor:
    """Sequential normalisation (the reference code's ``tree_2norm``, ``core_algos.py``
    ``compute_tree_grpo_outcome_advantage``): first over the task, then the result over the
    tree.

    ``S_i = (R_i - mean_g R) / (std_g R + eps)`` over every leaf of the task (``group_ids``),
    then ``A_i = (S_i - mean_tree S) / (std_tree S + eps)`` over the leaves of leaf ``i``'s
    tree; both stds unbiased. The result is again intra-tree: a tree whose leaves all scored
    alike gets 0, whatever its level against the task's other trees. As ``S`` is an affine map
    of ``R`` within a task, a tree of two or more leaves gets
    ``(R_i - mean_tree R) / (std_tree R + eps std_g R)``: :func:`tree_inner_advantages` but for
    the scale of eps (and where the task's rewards are all equal: 0). A tree with one leaf keeps
    its ``S_i``, as the reference's mean-0, std-1 rule for a singleton does (zeroing it would
    drop an unbranched ARPO tree's only signal).

    Shapes: ``rewards``, ``group_ids``, ``tree_ids`` ``[B]`` -> ``[B]``.
    """
    first = grpo_advantages(rewards, group_ids, eps=eps)
    _, inverse, counts = torch.unique(tree_ids, return_inverse=True, return_counts=True)
    alone = counts[inverse] < 2
    return torch.where(alone, first, grpo_advantages(first, tree_ids, eps=eps))


def response_span(mask: Tensor, attention: Tensor) -> Tensor:
    """Each row's response as the reference code sees it: from its first trained token to its
    last real token, observations (and a trailing observation) included.

    In the reference a sample is prompt + response, the response being the model's turns and
    the observations between them; ``tree_per_token`` pools the response's tokens
    (``attention_mask`` over the response, not the trained-token ``info_mask``), and the reward
    sits on its last token. Here the prompt is what comes before the first loss-mask-1 token.

    Shapes: ``mask`` (loss mask), ``attention`` ``[B, T]`` -> ``[B, T]`` bool (all False for
    a row without a trained token).
    """
    trained = as_bool_mask(mask)
    real = as_bool_mask(attention)
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(trained)
    after_start = trained.long().cummax(-1).values.bool()
    last = torch.where(real, positions, -1).max(-1, keepdim=True).values
    return after_start & (positions <= last) & trained.any(-1, keepdim=True)


def _token_group_advantages(rewards: Tensor, response: Tensor, ids: Tensor, eps: float) -> Tensor:
    """GRPO over the pooled response tokens of each group: every response token is one
    sample, whose reward is the row's ``R`` on its last response token and 0 elsewhere.
    ``[B]``, ``[B, T]`` bool, ``[B]`` -> ``[B, T]`` (0 off the response)."""
    positions = torch.arange(response.shape[-1], device=response.device).expand_as(response)
    last = torch.where(response, positions, -1).max(-1, keepdim=True).values
    token_rewards = torch.where(positions == last, rewards.detach().unsqueeze(-1), 0.0)
    token_ids = ids.unsqueeze(-1).expand_as(response)
    out = torch.zeros_like(token_rewards)
    out[response] = grpo_advantages(token_rewards[response], token_ids[response], eps=eps)
    return out


def tree_per_token_advantages(
    rewards: Tensor,
    response: Tensor,
    group_ids: Tensor,
    tree_ids: Tensor,
    eps: float = 1e-6,
) -> Tensor:
    """Tree-GRPO's two terms normalised over tokens (the reference code's ``tree_per_token``,
    ``core_algos.py`` ``compute_grpo_per_token_advantage``).

    Each response token ``t`` of leaf ``i`` carries a reward ``r_{i,t}``: ``R_i`` on the
    response's last token, 0 on the others (outcome reward only). The tokens of all the task's
    leaves form one pool, those of each tree another; with ``mu``, ``sigma`` the mean and
    unbiased std of a pool's rewards,
    ``A_{i,t} = (r_{i,t} - mu_g) / (sigma_g + eps) + (r_{i,t} - mu_tree) / (sigma_tree + eps)``.
    Unlike the sequence-level forms, the advantage varies along a row: with positive rewards
    every token but the last gets ``-mu / sigma``, so a longer response weighs more in the pool
    and its early tokens are pushed down. A pool whose rewards are all equal (every leaf 0)
    gets 0. The caller masks the result to the trained tokens (the reference's loss mask).

    Shapes: ``rewards`` ``[B]``, ``response`` ``[B, T]`` bool (:func:`response_span`),
    ``group_ids``, ``tree_ids`` ``[B]`` -> ``[B, T]`` (0 off the response).
    """
    return _token_group_advantages(rewards, response, group_ids, eps) + _token_group_advantages(
        rewards, response, tree_ids, eps
    )


def normalised_topk_entropy(topk_logprobs: Tensor, vocab_size: int) -> Tensor:
    """The entropy of the top-k distribution, renormalised, divided by ``log |V|``.

    ARPO (Dong et al. 2025, arXiv 2507.19849) measures the policy's uncertainty after a tool
    result from the top-k logprobs of the first generated tokens: ``p = softmax(topk)``,
    ``H = -sum p log p / log |V|``, averaged over the tokens. In [0, log k / log |V|].
    ARPO reads the top-k logprobs its engine returns; renormalising them over the top k here
    (rather than leaving the tail's mass out of the sum) is this project's choice: it makes the
    value independent of how much mass the tail holds, and it is stated, not confirmed.

    Shapes: ``topk_logprobs`` ``[N, k]`` (N tokens) -> scalar tensor (the mean over tokens).
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    logp = torch.log_softmax(topk_logprobs.detach().double(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1) / math.log(vocab_size)
    return entropy.mean()


def arpo_branch(
    entropy_delta: Tensor, uniform: Tensor, entropy_weight: float, threshold: float
) -> Tensor:
    """ARPO's entropy-based branching decision after a tool call.

    ``p = clamp(u - w * dH, 0, 1)`` with ``u ~ U(0, 1)`` and ``dH`` the rise of the normalised
    entropy over the trajectory's initial entropy; branch where ``p <= threshold``. A larger
    entropy rise lowers ``p`` and so branches more often (ARPO's released code:
    ``entropy_weight`` 0.2 in the 7B scripts, ``branch_probability`` the threshold).

    Shapes: ``entropy_delta``, ``uniform`` ``[N]`` -> ``[N]`` bool.
    """
    p = (uniform - entropy_weight * entropy_delta).clamp(0.0, 1.0)
    return p <= threshold


def arpo_turn_entropy(token_entropies: Tensor, vocab_size: int, tokens: int = 20) -> Tensor:
    """ARPO's step-level entropy of one model turn: the entropies of its first ``tokens``
    sampled tokens, summed, divided by ``log |V|``.

    ``H = sum_{j < k} H_j / log |V|`` with ``H_j = -sum_v p_{j,v} log p_{j,v}``. ARPO's code
    (``vllm_rollout_with_tools.py``, ``_calc_entropy``) sums ``-p log p`` over the top-10
    logprobs of each of the first 20 tokens and divides by ``log |V|`` (a sum over the tokens,
    not a mean: a turn shorter than k tokens counts fewer); here ``H_j`` is the entropy of the
    whole distribution the token was drawn from (what the HF generator reports,
    ``Completion.entropies``). With k = 20 the value lies in [0, 20].

    Shapes: ``token_entropies`` ``[n]`` (nats, n >= 0 tokens) -> scalar tensor.
    """
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    return token_entropies[:tokens].double().sum() / math.log(vocab_size)


def arpo_copies(
    entropy_delta: Tensor,
    uniform: Tensor,
    budget: int,
    entropy_weight: float,
    threshold: float,
) -> Tensor:
    """How many new leaves each candidate branch point gets under ARPO's budget.

    Candidates are visited in order, as ARPO's code does: candidate ``i`` has
    ``a_i = min(beam_size - 1, budget - made so far)`` attempts, and attempt ``j`` makes a copy
    where :func:`arpo_branch` says so for ``(dH_i, u_{i,j})``; ``copies_i`` counts them. The
    total never exceeds ``budget`` (the task's rollout.group_size minus the leaves it has).

    Shapes: ``entropy_delta`` ``[C]``, ``uniform`` ``[C, beam_size - 1]`` (one draw per
    attempt; draws beyond ``a_i`` are not looked at) -> ``[C]`` long.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if uniform.dim() != 2 or uniform.shape[0] != entropy_delta.shape[0]:
        raise ValueError(
            f"uniform must be [C, beam_size - 1] for C = {entropy_delta.shape[0]} branch points, "
            f"got {list(uniform.shape)}"
        )
    wanted = arpo_branch(
        entropy_delta.unsqueeze(-1).expand_as(uniform), uniform, entropy_weight, threshold
    )
    copies = torch.zeros(len(entropy_delta), dtype=torch.long)
    made = 0
    for i in range(len(entropy_delta)):
        attempts = min(uniform.shape[-1], budget - made)
        copies[i] = int(wanted[i, :attempts].sum()) if attempts > 0 else 0
        made += int(copies[i])
    return copies

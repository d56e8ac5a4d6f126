"""Preference losses on trajectory pairs (pure tensor math).

Sequence log-probabilities are sums over loss-mask-1 tokens only: the policy's own turns of an
agent trajectory, never the prompt or the observations an env inserted, exactly the tokens
RL and SFT train on.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from agentic_rl.algos.masked import masked_sum


def sequence_logps(logprobs: Tensor, mask: Tensor) -> Tensor:
    """``log pi(y | x) = sum_t m_t log pi(y_t | y_<t, x)`` over loss-mask-1 tokens.

    Shapes: ``logprobs``, ``mask`` ``[B, T]`` -> ``[B]``. NaN/inf at mask-0 positions is ignored.
    """
    return masked_sum(logprobs, mask, dim=-1)


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
) -> Tensor:
    """Direct Preference Optimization loss per pair (Rafailov et al. 2023, Eq. 7).

    ``margin = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))``,
    ``L = -log sigmoid(beta * margin)``; ``y_w`` the chosen, ``y_l`` the rejected trajectory.
    ``beta`` is the strength of the implicit KL to the reference. The reference logps are
    constants (detached). At initialisation (policy = reference) every pair has ``L = log 2``.
    Shapes: four ``[B]`` tensors -> ``[B]``. Raises ValueError unless ``beta > 0``.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    chosen = policy_chosen_logps - ref_chosen_logps.detach()
    rejected = policy_rejected_logps - ref_rejected_logps.detach()
    return -F.logsigmoid(beta * (chosen - rejected))


def dpo_margins(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
) -> Tensor:
    """The implicit reward margin ``(log pi/pi_ref)(y_w) - (log pi/pi_ref)(y_l)`` per pair,
    detached (a diagnostic: DPO training should make it grow). Shapes: ``[B]`` x4 -> ``[B]``."""
    chosen = policy_chosen_logps.detach() - ref_chosen_logps.detach()
    return chosen - (policy_rejected_logps.detach() - ref_rejected_logps.detach())

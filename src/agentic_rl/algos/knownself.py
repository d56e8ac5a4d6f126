"""KnownSelf's preference loss (Qiao et al. 2025, "Agentic Knowledgeable Self-awareness"): DPO
on (gold, failed) trajectory pairs plus the negative log-likelihood of the chosen trajectory,
so the preferred behaviour keeps its absolute probability while the margin grows."""

from __future__ import annotations

from torch import Tensor

from agentic_rl.algos.preference import dpo_loss


def dpo_nll_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    chosen_tokens: Tensor,
    beta: float = 0.5,
    nll_coef: float = 1.0,
) -> Tensor:
    """Per pair: ``L = -log sigmoid(beta * margin) + nll_coef * (-log pi(y_w) / |y_w|)``.

    ``margin`` is DPO's (``algos.preference.dpo_loss``); the NLL term is the chosen
    trajectory's mean negative logprob per trained token (``chosen_tokens`` = its number of
    loss-mask-1 tokens, >= 1). KnownSelf uses beta 0.5. Shapes: five ``[B]`` tensors -> ``[B]``.
    Example: margin 0 (policy = reference), chosen logp -4 over 2 tokens, nll_coef 1:
    log 2 + 2 = 2.693147."""
    dpo = dpo_loss(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta
    )
    return dpo + nll_coef * (-policy_chosen_logps / chosen_tokens.clamp(min=1))

"""RMM's retrospective reflection: a memory reranker trained online by REINFORCE from citations
(Tan et al. 2025, "In Prospect and Retrospect: Reflective Memory Management for Long-term
Personalized Dialogue Agents"). Pure tensor math.

Scores (linear residual maps of the query and memory embeddings, RMM Sec. 4.2):

    q' = q + W_q q,   m'_i = m_i + W_m m_i,   s_i = q' . m'_i                (s: [K])

Selection: Gumbel top-M over the K retrieved memories, s_i / tau + g_i with g_i ~ Gumbel(0, 1)
(tau = 0.5 in a reproduction); at evaluation the plain top-M.

Update: each selected memory's reward is +1 if the answer cited it and -1 otherwise; REINFORCE
with a baseline b (e.g. the running mean reward), with the selection's log-probability taken as
the softmax log-probability of each selected memory under s / tau:

    L = -(1 / M) sum_{i in selected} (r_i - b) log softmax(s / tau)_i
"""

from __future__ import annotations

import torch
from torch import Tensor


def residual_scores(q: Tensor, memories: Tensor, w_q: Tensor, w_m: Tensor) -> Tensor:
    """``s_i = (q + W_q q) . (m_i + W_m m_i)``. Shapes: q ``[D]``, memories ``[K, D]``, W ``[D, D]``
    -> ``[K]``."""
    q2 = q + w_q @ q
    m2 = memories + memories @ w_m.T
    return m2 @ q2


def gumbel_top_m(scores: Tensor, m: int, tau: float, generator: torch.Generator | None) -> Tensor:
    """Indices of M memories: top-M of ``scores / tau + Gumbel noise`` (``generator`` None = no
    noise, the plain top-M). Shapes: ``[K]`` -> ``[min(M, K)]`` long."""
    perturbed = scores.detach() / tau
    if generator is not None:
        u = torch.rand(scores.shape, generator=generator).clamp(1e-9, 1 - 1e-9)
        perturbed = perturbed - torch.log(-torch.log(u))
    return torch.topk(perturbed, min(m, scores.shape[0])).indices


def citation_reinforce_loss(
    scores: Tensor, selected: Tensor, rewards: Tensor, baseline: float, tau: float
) -> Tensor:
    """``L = -(1/M) sum_i (r_i - b) log softmax(s / tau)_i`` over the selected memories.

    Shapes: scores ``[K]``, selected ``[M]`` long, rewards ``[M]`` (+1 cited, -1 not) -> scalar.
    """
    logp = torch.log_softmax(scores / tau, dim=-1)[selected]
    return -((rewards - baseline) * logp).mean()

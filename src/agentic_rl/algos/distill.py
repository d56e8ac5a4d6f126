"""On-policy distillation: a teacher scores the student's own samples, token by token.

The student samples ``a_t ~ pi_theta(. | h_t)``; a teacher model scores the same tokens; the
per-token reverse KL ``KL(pi_theta || pi_teacher)`` is estimated on the sampled token and
minimised as a policy-gradient reward (Agarwal et al. 2024, "On-Policy Distillation of Language
Models: Learning from Self-Generated Mistakes" (GKD), ICLR, arXiv 2306.13649, with beta = 1;
Thinking Machines 2025, "On-Policy Distillation"; slime's ``--use-opd``). Shapes: ``B`` rows,
``T`` tokens; ``mask`` ``[B, T]`` is non-zero on policy tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentic_rl.algos.masked import as_bool_mask


def reverse_kl_advantages(
    advantages: Tensor,
    student_logprobs: Tensor,
    teacher_logprobs: Tensor,
    mask: Tensor,
    coef: float = 1.0,
) -> Tensor:
    """Advantages with the per-token reverse KL to the teacher subtracted.

    ``d_t = log pi_student(a_t | h_t) - log pi_teacher(a_t | h_t)`` on the sampled token (the
    k1 estimate of ``KL(pi_student || pi_teacher)`` at step t), ``A'_t = A_t - coef * d_t``
    with discount 0 (each token is charged its own divergence only), as slime's on-policy
    distillation and Thinking Machines' recipe do. Through the policy gradient ``-A'_t grad
    log pi(a_t)`` this is the exact reverse-KL gradient ``E[d_t grad log pi(a_t)]``; ``d_t``
    itself is data (no gradient): backpropagating it directly would give ``E[grad log pi]``,
    which is zero. ``A_t = 0`` everywhere is pure distillation; a task advantage adds RL.
    Single-sample ``d_t`` can be negative (it is non-negative only in expectation).
    Shapes: all ``[B, T]`` -> ``[B, T]``, exactly 0 at mask-0 positions.
    Raises ValueError for a negative ``coef``.
    """
    if coef < 0:
        raise ValueError(f"coef must be >= 0, got {coef}")
    m = as_bool_mask(mask)
    d = torch.where(m, student_logprobs.detach() - teacher_logprobs.detach(), 0)
    return torch.where(m, advantages - coef * d, 0)

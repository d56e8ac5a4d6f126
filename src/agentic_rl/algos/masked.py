"""Masked reductions over ``[B, T]`` token tensors.

Every reduction selects with ``torch.where`` instead of multiplying by the mask: ``x * 0`` is
still NaN when ``x`` is NaN or inf (e.g. log-probs of padding), whereas ``where`` drops the
value in the forward pass and sends exactly zero gradient to it in the backward pass.

A mask is a bool or float tensor; any non-zero entry marks a policy-generated token.
"""

from __future__ import annotations

import torch
from torch import Tensor

# A batch whose masked values spread by no more than this (relative to max(1, |mean|)) is
# treated as constant: whitening it would otherwise divide rounding noise by sqrt(eps).
ZERO_SPREAD_RTOL = 1e-6


def as_bool_mask(mask: Tensor) -> Tensor:
    """Return ``mask != 0`` as a bool tensor (a no-op for bool masks)."""
    return mask if mask.dtype == torch.bool else mask != 0


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is non-zero.

    ``sum_i x_i * [m_i != 0]``. Shapes: ``x`` and ``mask`` broadcastable (usually ``[B, T]``);
    returns a scalar when ``dim`` is None, else ``x`` reduced along ``dim``.
    """
    selected = torch.where(as_bool_mask(mask), x, 0)
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over masked positions; 0 (not NaN) where nothing is masked.

    ``sum_i x_i m_i / max(1, sum_i m_i)``. Shapes as in :func:`masked_sum`.
    """
    m = torch.broadcast_to(as_bool_mask(mask), x.shape)
    count = m.sum() if dim is None else m.sum(dim)
    # An empty selection has sum 0, so clamping the count gives 0 instead of 0/0 = NaN.
    return masked_sum(x, m, dim) / count.clamp_min(1).to(x.dtype)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = False) -> Tensor:
    """Variance of ``x`` over all masked positions (scalar).

    ``sum_i m_i (x_i - mu)^2 / (N - 1 if unbiased else N)`` with ``N = sum_i m_i``.
    The population form (``unbiased=False``) is what OpenRLHF uses to whiten token advantages.
    """
    m = torch.broadcast_to(as_bool_mask(mask), x.shape)
    mean = masked_mean(x, m)
    count = m.sum().to(x.dtype)
    denom = count - 1 if unbiased else count
    return masked_sum((x - mean) ** 2, m) / denom.clamp_min(1)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8, unbiased: bool = False) -> Tensor:
    """Whiten ``x`` with the mean and variance of its masked entries.

    ``(x - mu) / sqrt(var + eps)`` on masked positions, 0 elsewhere; as in PPO-for-LLM
    implementations (TRL ``masked_whiten``, OpenRLHF REINFORCE++). ``var`` is the population
    variance, or with ``unbiased`` the (N - 1) one over the N masked entries (veRL's default).
    If the masked values are constant (spread ``<= 1e-6 * max(1, |mu|)``) the result is exactly
    0: ``x - mu`` is then pure rounding noise, which ``1/sqrt(eps)`` would blow up to O(1).
    Shapes: ``x`` ``[B, T]``, ``mask`` ``[B, T]`` -> ``[B, T]``.
    """
    m = torch.broadcast_to(as_bool_mask(mask), x.shape)
    mean = masked_mean(x, m)
    var = masked_var(x, m, unbiased=unbiased)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    xd = x.detach()
    hi = torch.where(m, xd, -torch.inf).amax() if x.numel() else xd.new_zeros(())
    lo = torch.where(m, xd, torch.inf).amin() if x.numel() else xd.new_zeros(())
    # With no masked entry hi - lo = -inf, which also counts as constant.
    constant = (hi - lo) <= ZERO_SPREAD_RTOL * mean.detach().abs().clamp_min(1.0)
    return torch.where(m & ~constant, whitened, 0)

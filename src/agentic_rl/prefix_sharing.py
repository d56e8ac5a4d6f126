"""Shared-prefix forward: run the prompt that every row of a micro-batch shares only once.

In GRPO-style training the G samples of a group start with the same prompt (system message,
tool descriptions, question), often longer than the answers. A plain forward (and backward) pass
recomputes that prompt G times. Here the backbone runs the shared prefix once at batch size 1,
its KV cache is repeated for the B rows, and only the B suffixes are run against it; autograd
carries every row's gradient back through the repeated cache into the single prefix pass. The
result is the same function of the weights (equal up to float rounding); the cost of the prefix
drops from B x P tokens to P. It is the idea of Prefix Grouper (shared-prefix forward for GRPO,
2025), applied to any micro-batch whose rows share a leading run of tokens.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

MIN_SHARED_TOKENS = 8
"""Below this many shared tokens the two-pass forward is not worth its overhead."""


def shared_prefix_length(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, wanted: torch.Tensor
) -> int:
    """Length P of the token run that starts every row, capped so that every wanted position
    lies after it (the state predicting token c is at c - 1, which must be >= P - 1).

    input_ids, attention_mask, wanted: [B, T]. Returns 0 when nothing useful is shared."""
    batch, length = input_ids.shape
    if batch < 2 or length < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    differs = (~same).nonzero()
    prefix = int(differs[0]) if len(differs) else length
    cols = wanted.nonzero(as_tuple=True)[1]
    if len(cols):
        prefix = min(prefix, int(cols.min()))
    prefix = min(prefix, length - 1)  # at least one suffix column
    return prefix if prefix >= MIN_SHARED_TOKENS else 0


def backbone_hidden(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    wanted: torch.Tensor | None = None,
    share_prefix: bool = False,
) -> tuple[torch.Tensor, int]:
    """Last hidden states of `model`'s backbone, and the position the first of them belongs to.

    Plain: hidden [B, T, H], offset 0. Shared (a prefix of P >= MIN_SHARED_TOKENS tokens found,
    see `shared_prefix_length`): hidden [B, T - P + 1, H] for positions P - 1 .. T - 1, offset
    P - 1; earlier positions are never needed to predict a wanted token. Right-padded rows only.
    """
    backbone = getattr(model, model.base_model_prefix)
    prefix = 0
    if share_prefix and not _checkpointing(model):
        # (HF turns the KV cache off under activation checkpointing in training mode.)
        mask = attention_mask.bool() if wanted is None else wanted.bool() & attention_mask.bool()
        prefix = shared_prefix_length(input_ids, attention_mask, mask)
    if prefix == 0:
        return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, 0
    from transformers import DynamicCache

    batch, length = input_ids.shape
    cache = DynamicCache()
    cache_kw = cache_keyword(backbone)
    head = backbone(
        input_ids=input_ids[:1, :prefix],
        attention_mask=attention_mask[:1, :prefix],
        use_cache=True,
        **{cache_kw: cache},
    ).last_hidden_state
    cache.batch_repeat_interleave(batch)  # differentiable: a new tensor per layer
    positions = torch.arange(prefix, length, device=input_ids.device).expand(batch, -1)
    tail = backbone(
        input_ids=input_ids[:, prefix:],
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_kw: cache},
    ).last_hidden_state
    hidden = torch.cat([head[:, -1:].expand(batch, -1, -1), tail], dim=1)
    return hidden, prefix - 1


def _checkpointing(model: nn.Module) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # new, old name
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def cache_keyword(module: nn.Module) -> str:
    """The KV-cache argument of `module.forward`: `cache` in newer transformers,
    `past_key_values` before (and still accepted)."""
    params: Any = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"

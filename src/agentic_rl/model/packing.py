"""Packing a micro-batch into one row: shared prompts once, no padding.

The rows of a micro-batch (right-padded, usually a few GRPO groups one after another) become one
row: for each block of consecutive rows that share their prompt, the prompt once, then each
row's own tokens after it, padding dropped. Position ids restart after the prompt for each row,
and a token sees only the earlier tokens of its block's prompt and of its own row, so every state
equals the plain forward's (tested up to float rounding); the linear layers, most of the cost,
see sum(P_g) + sum(S_b) tokens instead of B x T.

This project's attention (attention.py) computes a packed row segment by segment
(`PackedSegments`); any other attention gets the equivalent block mask over the whole row.
`prefix_sharing.backbone_hidden` decides when packing pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agentic_rl.model.attention import PackedSegments


@dataclass(frozen=True)
class PackedLayout:
    """One packed row. input_ids, positions [1, L]; segments: the blocks and rows (attention);
    gather [B, T]: the packed position of each (row, column) of the original micro-batch (0 at
    padding); blocks: (first row, end row, prompt length) of each block."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    segments: PackedSegments
    gather: torch.Tensor
    blocks: list[tuple[int, int, int]]

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[1]

    def block_mask(self) -> torch.Tensor:
        """The boolean [1, 1, L, L] mask equivalent to `segments` (True = may attend)."""
        seg = self.segments
        total, device = self.tokens, self.input_ids.device
        block_of = torch.empty(total, dtype=torch.long, device=device)
        row_of = torch.full((total,), -1, dtype=torch.long, device=device)  # -1: a prompt token
        for g, (first, end, _) in enumerate(self.blocks):
            block_of[seg.prefix_index[g][seg.prefix_valid[g]]] = g
            for b in range(first, end):
                block_of[seg.index[b][seg.valid[b]]] = g
                row_of[seg.index[b][seg.valid[b]]] = b
        same_block = block_of[:, None] == block_of[None, :]
        visible = (row_of[None, :] < 0) | (row_of[None, :] == row_of[:, None])
        order = torch.arange(total, device=device)
        return (same_block & visible & (order[:, None] >= order[None, :]))[None, None]

    def attention_scores(self) -> int:
        """Scores the segment-wise attention computes: G x P^2 + B x S x (P + S)."""
        groups, plen = self.segments.prefix_valid.shape
        batch, width = self.segments.valid.shape
        return groups * plen * plen + batch * width * (plen + width)


def pack_rows(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, wanted: torch.Tensor
) -> PackedLayout | None:
    """The packed layout of right-padded rows, or None when some row is not a run of ones
    followed by padding. A row's prompt is everything before its first wanted token (its
    state at the column before is the first one needed); consecutive rows with the same prompt
    form a block. input_ids, attention_mask, wanted: [B, T]."""
    batch, length = input_ids.shape
    device = input_ids.device
    lengths = attention_mask.sum(dim=1)
    ones = torch.arange(length, device=device) < lengths[:, None]
    if not torch.equal(attention_mask.bool(), ones) or bool((lengths == 0).any()):
        return None
    cols = torch.arange(length, device=device).expand(batch, -1)
    first = torch.where(wanted.bool() & ones, cols, length).min(dim=1).values
    prompt = torch.minimum(first, lengths).clamp(min=1)  # [B]
    same = torch.zeros(batch, dtype=torch.bool, device=device)
    if batch > 1:
        inside = cols[1:] < prompt[1:, None]
        equal = ((input_ids[1:] == input_ids[:-1]) | ~inside).all(dim=1)
        same[1:] = equal & (prompt[1:] == prompt[:-1])
    starts = (~same).nonzero().squeeze(1).tolist() + [batch]
    blocks = [(a, b, int(prompt[a])) for a, b in zip(starts[:-1], starts[1:], strict=True)]

    plen = max(p for _, _, p in blocks)
    width = max(1, int((lengths - prompt).max()))
    prefix_index = torch.zeros((len(blocks), plen), dtype=torch.long, device=device)
    index = torch.zeros((batch, width), dtype=torch.long, device=device)
    gather = torch.zeros((batch, length), dtype=torch.long, device=device)
    block = torch.zeros(batch, dtype=torch.long, device=device)
    ids, positions = [], []
    cursor = 0
    for g, (first_row, end_row, p) in enumerate(blocks):
        ids.append(input_ids[first_row, :p])
        positions.append(torch.arange(p, device=device))
        prefix_index[g, :p] = torch.arange(cursor, cursor + p, device=device)
        cursor += p
        for b in range(first_row, end_row):
            n = int(lengths[b]) - p
            ids.append(input_ids[b, p : p + n])
            positions.append(torch.arange(p, p + n, device=device))
            index[b, :n] = torch.arange(cursor, cursor + n, device=device)
            gather[b, :p] = prefix_index[g, :p]
            gather[b, p : p + n] = index[b, :n]
            block[b] = g
            cursor += n
    prefix_valid = torch.arange(plen, device=device) < torch.tensor(
        [p for _, _, p in blocks], device=device
    ).unsqueeze(1)
    valid = torch.arange(width, device=device) < (lengths - prompt).unsqueeze(1)
    placed = torch.cat([prefix_index[prefix_valid], index[valid]])
    order = torch.empty(cursor, dtype=torch.long, device=device)
    order[placed] = torch.arange(cursor, device=device)
    segments = PackedSegments(prefix_index, prefix_valid, index, valid, block, order)
    return PackedLayout(
        torch.cat(ids).unsqueeze(0), torch.cat(positions).unsqueeze(0), segments, gather, blocks
    )


def packed_forward(
    backbone: nn.Module, layout: PackedLayout, segment_attention: bool
) -> torch.Tensor:
    """The backbone's last hidden states for every (row, column) of the original micro-batch,
    [B, T, H], from one pass over the packed row (states at padding are arbitrary)."""
    if segment_attention:  # the attention reads the segments; no L x L mask is built
        extra = {"attention_mask": None, "packed_segments": layout.segments}
    else:
        extra = {"attention_mask": layout.block_mask()}
    hidden = backbone(
        input_ids=layout.input_ids, position_ids=layout.positions, **extra
    ).last_hidden_state[0]  # [L, H]
    batch, length = layout.gather.shape
    return hidden.index_select(0, layout.gather.reshape(-1)).view(batch, length, -1)

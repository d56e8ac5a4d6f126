"""Packing a micro-batch into one row: every shared prefix once, no padding.

The rows of a micro-batch (right-padded, usually a few GRPO groups one after another) become one
row, laid out as a prefix tree of segments. For each block of consecutive rows that share their
prompt (or open alike for MIN_SHARED_RUN tokens or more: the step samples of step mode, whose
contexts are one prompt plus different recent steps), what they all open with once; after it,
a run of tokens that several of the block's rows continue with alike (at least MIN_SHARED_RUN
tokens: the turns and observations that the leaves of a tree rollout copy from their parent,
rollout/tree.py) once more, and so on down; then each row's own tokens, padding dropped.
Position ids are the original columns, and a token sees only its ancestor segments and the
earlier tokens of its own segment, so every state equals the plain forward's (causal attention:
a token's state depends only on the tokens before it; tested up to float rounding); the linear
layers, most of the cost, see each shared token once instead of once per row. Rows that share only their prompt (independent samples of a group) pack as a prompt
and one segment per row: two levels.

This project's attention (attention.py) computes a packed row level by level
(`PackedSegments`); any other attention gets the equivalent block mask over the whole row.
`prefix_sharing.choose_form` decides when packing pays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from agentic_rl.model.attention import PackedSegments, SegmentLevel

MIN_SHARED_RUN = 8
"""Fewest tokens after their prompt that rows must continue with alike to share them as a
segment of their own: a shorter run (two answers that open with the same few tokens) would add
a level, an attention call per layer, to save a handful of tokens; it stays in each row's own
segment, as when only the prompt is shared."""


@dataclass(frozen=True)
class PackedLayout:
    """One packed row. input_ids, positions [1, L]; segments: the segment tree (attention);
    gather [B, T]: the packed position of each (row, column) of the original micro-batch (0 at
    padding); blocks: (first row, end row, root length) of each block: the tokens all its
    rows open with, run once."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    segments: PackedSegments
    gather: torch.Tensor
    blocks: list[tuple[int, int, int]]

    @property
    def tokens(self) -> int:
        return self.input_ids.shape[1]

    def block_mask(self) -> torch.Tensor:
        """The boolean [1, 1, L, L] mask equivalent to `segments` (True = may attend): each
        token to its ancestor segments' tokens and to its own segment's tokens up to itself."""
        total = self.tokens
        mask = torch.zeros((total, total), dtype=torch.bool, device=self.input_ids.device)
        for level in self.segments.levels:
            width = level.valid.shape[1]
            own = torch.ones(width, width, dtype=torch.bool, device=mask.device).tril()
            own = own & level.valid[:, None, :] & level.valid[:, :, None]  # [N, W, W]
            seen = level.valid[:, :, None] & level.context_valid[:, None, :]  # [N, W, A]
            allowed = torch.cat([seen, own], dim=-1)  # [N, W, A + W]
            keys = torch.cat([level.context, level.index], dim=1)[:, None, :]  # [N, 1, A + W]
            queries = level.index[:, :, None]  # [N, W, 1]
            mask[queries.expand_as(allowed)[allowed], keys.expand_as(allowed)[allowed]] = True
        return mask[None, None]

    def attention_scores(self) -> int:
        """Scores the level-wise attention computes: the sum over levels of N x W x (A + W)
        (a prompt and its answers: G x P^2 + B x S x (P + S))."""
        return sum(
            level.valid.numel() * (level.context.shape[1] + level.valid.shape[1])
            for level in self.segments.levels
        )


@dataclass
class _Segment:
    """Columns [start, end) of `row`, shared by `rows` (row included), at `depth` in the tree."""

    row: int
    start: int
    end: int
    depth: int
    rows: list[int]


def pack_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    wanted: torch.Tensor,
    share_turns: bool = True,
) -> PackedLayout | None:
    """The packed layout of right-padded rows, or None when some row is not a run of ones
    followed by padding. A row's prompt is everything before its first wanted token (its
    state at the column before is the first one needed); consecutive rows with the same prompt
    form a block, and so do consecutive rows that open with the same MIN_SHARED_RUN tokens or
    more although their prompts differ (`share_turns`: the step samples of step mode, whose
    contexts are the episode's prompt plus other recent steps, or memory mode's conversations,
    which re-send the same instructions). A block's root segment is what all its rows open
    with: their prompt, or their longest common prefix where longer or where the prompts
    differ. Within a block, rows that continue alike for MIN_SHARED_RUN tokens or more share
    that run as one segment (`share_turns`; False: blocks of equal prompts only, the prompt
    once, each row's own tokens after it). input_ids, attention_mask, wanted: [B, T]."""
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
    common = torch.zeros(batch, dtype=torch.long, device=device)  # row b's with row b - 1
    if batch > 1:
        alike = (input_ids[1:] == input_ids[:-1]) & ones[1:] & ones[:-1]
        common[1:] = alike.long().cumprod(dim=1).sum(dim=1)  # leading tokens in common
        same[1:] = (prompt[1:] == prompt[:-1]) & (common[1:] >= prompt[1:])  # one prompt
        if share_turns:
            same[1:] |= common[1:] >= MIN_SHARED_RUN
    starts = (~same).nonzero().squeeze(1).tolist() + [batch]
    common_of, prompt_of = common.tolist(), prompt.tolist()
    blocks = []
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        # what all its rows open with (rows of one prompt open with at least the prompt)
        root = min(common_of[a + 1 : b], default=prompt_of[a])
        blocks.append((a, b, root if share_turns else prompt_of[a]))

    ids, ends = input_ids.tolist(), lengths.tolist()
    segments: list[_Segment] = []
    for first_row, end_row, p in blocks:
        rows = list(range(first_row, end_row))
        segments.append(_Segment(first_row, 0, p, 0, rows))
        if share_turns:
            _branch(ids, ends, rows, p, p, 1, segments)
        else:
            segments += [_Segment(b, p, ends[b], 1, [b]) for b in rows if ends[b] > p]
    # Ancestors before descendants; rows that share only their prompt keep their order.
    segments.sort(key=lambda s: (min(s.rows), s.depth))
    return _layout(input_ids, segments, blocks)


def _branch(
    ids: list[list[int]],
    ends: list[int],
    rows: list[int],
    start: int,
    open_from: int,
    depth: int,
    out: list[_Segment],
) -> None:
    """Append the segments of `rows` (token lists `ids`, lengths `ends`), which agree on every
    column before `start` and whose columns [open_from, start) are in no segment yet (a common
    run too short to be one), at `depth`."""
    alike: dict[int, list[int]] = {}
    for b in rows:
        if ends[b] > start:
            alike.setdefault(ids[b][start], []).append(b)
        elif open_from < start:  # the row ends inside a short common run: its own segment
            out.append(_Segment(b, open_from, start, depth, [b]))
    for members in alike.values():
        if len(members) == 1:
            b = members[0]
            out.append(_Segment(b, open_from, ends[b], depth, [b]))
            continue
        stop = min(ends[b] for b in members)
        run = start + 1
        head = ids[members[0]]
        while run < stop and all(ids[b][run] == head[run] for b in members):
            run += 1
        if run - start >= MIN_SHARED_RUN:
            out.append(_Segment(members[0], open_from, run, depth, members))
            _branch(ids, ends, members, run, run, depth + 1, out)
        else:
            _branch(ids, ends, members, run, open_from, depth, out)


def _layout(
    input_ids: torch.Tensor, segments: list[_Segment], blocks: list[tuple[int, int, int]]
) -> PackedLayout:
    """The packed row of `segments` (placed in their order), their levels and the gather."""
    device = input_ids.device
    gather = torch.zeros_like(input_ids)
    placed, cursor = [], 0
    for s in segments:
        placed.append(torch.arange(cursor, cursor + s.end - s.start, device=device))
        gather[s.rows, s.start : s.end] = placed[-1]
        cursor += s.end - s.start
    levels, kept = [], []
    for depth in range(max(s.depth for s in segments) + 1):
        mine = [(s, at) for s, at in zip(segments, placed, strict=True) if s.depth == depth]
        if not mine:
            continue
        width = max(s.end - s.start for s, _ in mine)
        seen = max(s.start for s, _ in mine)
        index = torch.zeros((len(mine), width), dtype=torch.long, device=device)
        context = torch.zeros((len(mine), seen), dtype=torch.long, device=device)
        for n, (s, at) in enumerate(mine):
            index[n, : len(at)] = at
            context[n, : s.start] = gather[s.row, : s.start]
        sizes = torch.tensor([s.end - s.start for s, _ in mine], device=device)
        starts = torch.tensor([s.start for s, _ in mine], device=device)
        valid = torch.arange(width, device=device) < sizes[:, None]
        context_valid = torch.arange(seen, device=device) < starts[:, None]
        levels.append(SegmentLevel(index, valid, context, context_valid))
        kept.append(index[valid])
    order = torch.empty(cursor, dtype=torch.long, device=device)
    order[torch.cat(kept)] = torch.arange(cursor, device=device)
    rows_ids = [input_ids[s.row, s.start : s.end] for s in segments]
    positions = [torch.arange(s.start, s.end, device=device) for s in segments]
    return PackedLayout(
        torch.cat(rows_ids).unsqueeze(0),
        torch.cat(positions).unsqueeze(0),
        PackedSegments(tuple(levels), order),
        gather,
        blocks,
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

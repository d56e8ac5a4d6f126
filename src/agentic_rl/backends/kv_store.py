"""The HF generator's store of KV kept between `generate` calls (backends/hf.py).

Multi-turn contexts only grow: an episode's next prompt is its last prompt, the tokens sampled
for it, and the observation after them. So when a row of a call finishes, the KV of the tokens
it fed through the model is kept here, keyed by those tokens; when the episode comes back, in
whatever call, its stored KV is loaded and only the new tokens are prefilled.

What the store guarantees: an entry is reused only for a prompt that its tokens are a proper
prefix of, and (a vision-language model) whose pictures start with the pictures the entry has
seen, compared by hash: equal placeholder tokens may stand for other pictures. The store never
holds KV of older weights: the generator clears it whenever the weights change. It is bounded
(`fit`): its entries, with the rows of the call being decoded, number at most the most rows
one call has had.
"""

from __future__ import annotations

from typing import Any

import torch

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]
"""One row's KV: per layer, (keys [heads, positions, head_dim], values [the same])."""


class KVStore:
    """Stored KV of finished rows, keyed by the tokens it was computed on (oldest first)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, ...], LayerKV] = {}
        self._pictures: dict[tuple[int, ...], tuple[str, ...]] = {}  # stored KV's pictures
        self.rows = 0
        """The most rows one `generate` call has had: the bound of `fit`."""

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries, self._pictures = {}, {}

    def note_rows(self, rows: int) -> None:
        """A call of `rows` rows starts: the bound grows to the widest call's rows."""
        self.rows = max(self.rows, rows)

    def put(
        self, fed: tuple[int, ...], kv: LayerKV, pictures: tuple[str, ...] | None = None
    ) -> None:
        """Keep the KV of the tokens `fed` (and the hashes of the pictures it has seen, where
        the call had pictures) as the newest entry."""
        self._entries.pop(fed, None)  # re-stored last: the newest entry
        self._entries[fed] = kv
        if pictures is not None:
            self._pictures[fed] = pictures

    def drop(self, fed: tuple[int, ...]) -> None:
        self._entries.pop(fed, None)
        self._pictures.pop(fed, None)

    def pictures(self, fed: tuple[int, ...]) -> tuple[str, ...]:
        """The hashes of the pictures the entry `fed` has seen (none if it is not stored)."""
        return self._pictures.get(fed, ())

    def lookup(
        self, prompt: tuple[int, ...], pictures: tuple[str, ...] = ()
    ) -> tuple[int, LayerKV | None]:
        """The longest stored sequence that is a proper prefix of `prompt`, and its KV; its
        pictures (hashes) must be the first of the prompt's `pictures`."""
        best: tuple[int, LayerKV | None] = (0, None)
        for fed, kv in self._entries.items():
            if best[0] < len(fed) < len(prompt) and prompt[: len(fed)] == fed:
                seen = self._pictures.get(fed, ())
                if pictures[: len(seen)] == seen:
                    best = (len(fed), kv)
        return best

    def fit(self, running: int) -> None:
        """Drop the oldest stored entries until they and the `running` rows of the call being
        decoded are at most `rows`, the most rows one `generate` call has had (a rollout's
        episodes). With rollout.env_workers > 0 an episode waiting on its env step keeps its
        KV for its next turn, in whatever call that comes (the KV a lockstep call would hold
        for it). The entry of an episode that ended stays until rows are short or the weights
        change (`HFGenerator.sleep` before each update): a rollout's KV stays within what its
        widest call holds at the episodes' current lengths."""
        surplus = len(self._entries) + running - self.rows
        for fed in list(self._entries)[: max(surplus, 0)]:  # oldest first
            self.drop(fed)


def row_kv(cache: Any, attn: torch.Tensor, row: int) -> LayerKV:
    """The KV of one live row of a batch cache at its unmasked positions, copied out."""
    valid = attn[row].bool()
    return [
        (layer.keys[row][:, valid].clone(), layer.values[row][:, valid].clone())
        for layer in cache.layers
    ]


def load_past(
    cache: Any, found: list[tuple[int, LayerKV | None]], past: int, device: torch.device
) -> None:
    """Left-pad each row's stored KV (`found`: per row, its length and KV, or none) to `past`
    positions and load them into `cache`."""
    template = next(kv for _, kv in found if kv is not None)
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(found), k0.shape[0], past, k0.shape[-1]))
        values = v0.new_zeros((len(found), v0.shape[0], past, v0.shape[-1]))
        for i, (length, kv) in enumerate(found):
            if kv is not None:
                keys[i, :, past - length :] = kv[layer][0]
                values[i, :, past - length :] = kv[layer][1]
        cache.update(keys.to(device), values.to(device), layer)

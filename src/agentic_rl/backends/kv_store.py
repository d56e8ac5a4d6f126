"""The HF generator's store of KV kept between `generate` calls (backends/hf.py).

Multi-turn contexts only grow: an episode's next prompt is its last prompt, the tokens sampled
for it, and the observation after them. And a branch of a tree rollout (rollout/tree.py) starts
from its parent's tokens up to a turn boundary. So when a row of a call finishes, the KV of the
tokens it fed through the model is kept here, keyed by those tokens; a later prompt, in
whatever call, reuses the KV of an entry it continues whole (its episode's earlier turn) or,
in a tree rollout and in step and memory modes (`cut_prefixes`), of the longest prefix it shares
with a stored entry (the KV of a position depends on the tokens up to it only, so the first L
positions of an entry are the KV of any prompt that starts with the same L tokens) and prefills
only the rest. At least one
token of a prompt is always prefilled: its logits are the first sampled token's.

What the store guarantees:
  * exact reuse: KV is reused only for tokens the prompt shares with the entry, at the same
    positions; an entry that has seen pictures (a vision-language model) is reused only whole,
    for a prompt it is a proper prefix of and whose pictures start with the entry's (by hash:
    equal placeholder tokens may stand for other pictures), since a cut could fall inside a
    picture's placeholders;
  * never older weights: the generator clears it whenever the weights change;
  * bounded (`fit`): after each call at most `rows` entries, the larger of the generator's
    `kv_rows` (a tree rollout's B x G episodes, backends/base.py `make_generator`) and the
    most rows one call has had; an entry holds one row's KV at the positions it fed, so the
    store holds at most `rows` contexts, what a lockstep call of that many episodes holds;
  * one entry per episode: a call that continues an entry (its tokens are a prefix of the
    call's prompt) drops it, as the row's own KV replaces it when the call ends (`take`). An
    entry a prompt shares only part of (a tree's parent, read by its branches) stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]
"""One row's KV: per layer, (keys [heads, positions, head_dim], values [the same])."""


class Hit(NamedTuple):
    """What a prompt reuses from the store: its first `length` tokens' KV (none if 0), and how
    many of the prompt's pictures that KV has seen (the rest go into the prefill)."""

    length: int = 0
    kv: LayerKV | None = None
    pictures: int = 0


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens two token arrays share: the index of their first difference,
    or the shorter length when one starts the other."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def truncate(kv: LayerKV, length: int) -> LayerKV:
    """The KV of the first `length` positions (views, no copy)."""
    return [(k[:, :length], v[:, :length]) for k, v in kv]


class KVStore:
    """Stored KV of finished rows, keyed by the tokens it was computed on (oldest first)."""

    def __init__(self, min_rows: int = 0, cut_prefixes: bool = False) -> None:
        self._entries: dict[tuple[int, ...], LayerKV] = {}
        self._tokens: dict[tuple[int, ...], np.ndarray] = {}  # the keys, for `common_prefix`
        self._pictures: dict[tuple[int, ...], tuple[str, ...]] = {}  # stored KV's pictures
        self.rows = min_rows
        """The bound of `fit`: `min_rows`, or the most rows one `generate` call has had."""
        self.cut_prefixes = cut_prefixes
        """Whether a prompt may reuse an entry it shares only a part of (a tree's branch, its
        parent; a step- or memory-mode context, the prompt an earlier turn started with:
        backends/base.py `_hf_generator`). Off in episode mode: a cut entry's KV was computed
        in another forward than a fresh prefill of the same tokens, so its logprobs may differ
        in the last bits, and there a run that replays an episode (a tool-infrastructure retry)
        gets the same logprobs as the undisturbed run. An entry a prompt continues whole is
        that episode's own KV, the same in both runs."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def positions(self) -> int:
        """Token positions whose KV is stored, over all entries."""
        return sum(len(fed) for fed in self._entries)

    def clear(self) -> None:
        self._entries, self._tokens, self._pictures = {}, {}, {}

    def note_rows(self, rows: int) -> None:
        """A call of `rows` rows starts: the bound grows to the widest call's rows."""
        self.rows = max(self.rows, rows)

    def put(
        self, fed: tuple[int, ...], kv: LayerKV, pictures: tuple[str, ...] | None = None
    ) -> None:
        """Keep the KV of the tokens `fed` (and the hashes of the pictures it has seen, where
        the call had pictures) as the newest entry."""
        self.drop(fed)  # re-stored last: the newest entry
        self._entries[fed] = kv
        self._tokens[fed] = np.asarray(fed, dtype=np.int64)
        if pictures is not None:
            self._pictures[fed] = pictures

    def drop(self, fed: tuple[int, ...]) -> None:
        self._entries.pop(fed, None)
        self._tokens.pop(fed, None)
        self._pictures.pop(fed, None)

    def lookup(self, prompt: tuple[int, ...], pictures: tuple[str, ...] = ()) -> Hit:
        """The KV of the longest prefix `prompt` shares with a stored entry, up to all its
        tokens but the last (module docstring: pictures' entries only whole)."""
        return self._scan(prompt, pictures)[0]

    def take(
        self, prompts: Sequence[tuple[int, ...]], pictures: Sequence[tuple[str, ...]]
    ) -> list[Hit]:
        """What each prompt of a call reuses (`lookup`); then the entries the call continues
        (tokens a prefix of one of its prompts, pictures the first of its) are dropped: the
        row's own KV, stored when it finishes, holds them and more."""
        scans = [self._scan(p, seen) for p, seen in zip(prompts, pictures, strict=True)]
        for _, continued in scans:
            for fed in continued:
                self.drop(fed)
        return [hit for hit, _ in scans]

    def _scan(
        self, prompt: tuple[int, ...], pictures: tuple[str, ...]
    ) -> tuple[Hit, list[tuple[int, ...]]]:
        """`lookup`'s hit, and the entries `prompt` continues (`take`)."""
        best, continued = Hit(), []
        tokens = np.asarray(prompt, dtype=np.int64)
        for fed, kv in self._entries.items():
            if not self.cut_prefixes and (
                len(fed) > len(prompt) or prompt[len(fed) - 1] != fed[-1]
            ):
                continue  # not a prefix of the prompt, and only a cut could reuse a part of it
            shared = common_prefix(tokens, self._tokens[fed])
            seen = self._pictures.get(fed, ())
            if shared < len(fed) or pictures[: len(seen)] != seen:  # a part, or other pictures
                if self.cut_prefixes and not seen and min(shared, len(prompt) - 1) > best.length:
                    best = Hit(min(shared, len(prompt) - 1), kv)
                continue
            continued.append(fed)
            if min(shared, len(prompt) - 1) > best.length and (not seen or shared < len(prompt)):
                best = Hit(min(shared, len(prompt) - 1), kv, len(seen))
        if best.kv is not None and best.length < best.kv[0][0].shape[1]:
            best = best._replace(kv=truncate(best.kv, best.length))
        return best, continued

    def fit(self, running: int) -> None:
        """Drop the oldest stored entries until they and the `running` rows of the call being
        decoded are at most `rows` (module docstring). With rollout.env_workers > 0 an
        episode waiting on its env step keeps its KV for its next turn, in whatever call that
        comes (the KV a lockstep call would hold for it); in a tree rollout, whose rounds play
        fewer rows than its episodes (`kv_rows`), a parent's KV stays for its branches. The
        entry of an episode that ended stays until rows are short or the weights change
        (`HFGenerator.sleep` before each update)."""
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


def load_past(cache: Any, hits: Sequence[Hit], past: int, device: torch.device) -> None:
    """Left-pad each row's reused KV (`hits`, from `KVStore.take`) to `past` positions and load
    them into `cache`."""
    template = next(hit.kv for hit in hits if hit.kv is not None)
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((len(hits), k0.shape[0], past, k0.shape[-1]))
        values = v0.new_zeros((len(hits), v0.shape[0], past, v0.shape[-1]))
        for i, (length, kv, _) in enumerate(hits):
            if kv is not None:
                keys[i, :, past - length :] = kv[layer][0]
                values[i, :, past - length :] = kv[layer][1]
        cache.update(keys.to(device), values.to(device), layer)

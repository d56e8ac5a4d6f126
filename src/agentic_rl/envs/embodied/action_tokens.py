"""Discretised action tokens, as VLA-RL (and OpenVLA before it) write robot actions.

Each action dimension is clipped to [-1, 1] and cut into `num_bins` uniform bins; the action is
written as one vocabulary token per dimension and decoded at the bin centre
(-1 + (2k + 1) / num_bins for bin k); at most 256 bins, VLA-RL's number. VLA-RL maps its 256 bins to the last 256 tokens of the
vocabulary. Bin k is CODE_WORDS[k] (envs/code_words.py: existing single-token words, not new
special tokens, and why), so each bin is exactly one token id, the sampled ids are the action,
and the words, separated by their own leading spaces, parse back without ambiguity. The rollout
decodes a turn's ids only to parse the action; the trajectory keeps the sampled ids (never
re-tokenised).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_rl.envs.code_words import CODE_WORDS, NUM_CODE_WORDS, parse_codes


class ActionCodec:
    """`dims` action dimensions, `num_bins` bins each, written as CODE_WORDS[bin]."""

    def __init__(self, num_bins: int = NUM_CODE_WORDS, dims: int = 3) -> None:
        if not 2 <= num_bins <= NUM_CODE_WORDS:
            raise ValueError(f"num_bins must be in 2..{NUM_CODE_WORDS}, got {num_bins}")
        if dims < 1:
            raise ValueError(f"dims must be >= 1, got {dims}")
        self.num_bins = num_bins
        self.dims = dims
        self.words = CODE_WORDS[:num_bins]

    def bin_of(self, value: float) -> int:
        """The bin of `value` (clipped to [-1, 1] first)."""
        clipped = min(max(float(value), -1.0), 1.0)
        return min(int((clipped + 1.0) / 2.0 * self.num_bins), self.num_bins - 1)

    def centre(self, k: int) -> float:
        """The value bin `k` decodes to: its centre."""
        return -1.0 + (2 * k + 1) / self.num_bins

    def encode_bins(self, bins: Sequence[int]) -> str:
        """The action text: one word per dimension, each with its leading space."""
        if len(bins) != self.dims or not all(0 <= k < self.num_bins for k in bins):
            raise ValueError(f"need {self.dims} bins in 0..{self.num_bins - 1}, got {list(bins)}")
        return "".join(" " + self.words[k] for k in bins)

    def encode(self, values: Sequence[float]) -> str:
        """Values (each clipped to [-1, 1]) as action text."""
        return self.encode_bins([self.bin_of(v) for v in values])

    def decode_bins(self, text: str) -> list[int]:
        """The bins of an action text; raises CodeParseError naming what is wrong (a word
        that is no action token, a token of a bin past `num_bins`, the wrong count)."""
        return parse_codes(text, self.dims, self.num_bins, "action token")

    def decode(self, text: str) -> list[float]:
        """The action values (bin centres) of an action text."""
        return [self.centre(k) for k in self.decode_bins(text)]

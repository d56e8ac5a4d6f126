"""Discretised action tokens, as VLA-RL (and OpenVLA before it) write robot actions.

Each action dimension is clipped to [-1, 1] and cut into `num_bins` uniform bins; the action is
written as one vocabulary token per dimension and decoded at the bin centre
(-1 + (2k + 1) / num_bins for bin k). VLA-RL maps its 256 bins to the last 256 tokens of the
vocabulary.

The choice here: existing vocabulary tokens, not new special tokens. New tokens (`<a_12>`)
would change the embedding matrix of every model copy (policy, reference, critic, the vLLM
engine, every exported checkpoint of a multi-stage recipe) and start from untrained rows;
reusing existing tokens leaves the model untouched, as VLA-RL does. Bin k is ACTION_WORDS[k]:
the last 256 tokens of the bundled SmolLM2 vocabulary that are a whole lower-case word with a
leading space (" exfol" is token 49149, the vocabulary's last such word), so each bin is
exactly one token id, the sampled ids are the action, and the words, separated by their own
leading spaces, parse back without ambiguity. The rollout decodes a turn's ids only to parse
the action; the trajectory keeps the sampled ids (never re-tokenised). `action_token_ids`
checks a tokenizer keeps every bin one token (tests/envs/test_manipulation_env.py runs it on
the bundled tokenizer); with another tokenizer the words still parse, but may take several
tokens each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_BINS = 256  # VLA-RL's bins per dimension
_WORDS = """
    exfol pungent meltdown reassured aromatherapy browning carbide commercials volleyball
    orangutans dendritic novo delusions assuring prel mids passports suppresses unmet insofar
    bathe revolved brach marig imaginable sprouted smoky dispens standardised superflu
    factoring disclosing orthodoxy dishonesty battlefields barbed selectivity vermic sizeable
    lighted edifice clf wastage evaporated reassure veneration epics triad checkpoints
    improvised provoking apologized snacking catastrophes cigar uttered headfirst physique
    opposes planks particulates partisans stencil wikipedia superconducting crochet summertime
    compensatory duke instructing sucked yin lapse malls fuses unbearable decentralization
    pharmacology barefoot hygienic excesses intelligently magically repub whooping proj
    overheard resettlement mythologies slurry inertial unease authenticated payloads
    generalize accuse hrs dru hypo standby eut simmering anonymously nitrite precinct bioc
    preclude shorthand lutein electrification fungicide constituencies firewalls textured
    restrain luke fend casser wreak bibliographic hillside leaflet macrom savanna satiety
    portability infrequently emancip resumes antihistamines diaper intimidated ideation elm
    deprecated complying conund trophic cranberry militias turquoise spondyl thru moor inext
    custod doorstep decreed totaling booth editable workable diuretic caregiving roughness
    falsehood complimentary pyg mutate laborious accusing rechargeable alerted pickles
    counterproductive invoice preexisting engender monoclonal monounsaturated reposition
    childbearing sphincter cockroach mattresses lambs hexagonal wetter purposefully didactic
    depressions unbroken pter hydrolysis dissociation galvanized theatres orphaned checksum
    fraternity flexion ecologists nozzles overh rake indigo ergonomic spoilage vascul
    chronicle crowding deliverance annuals skincare outage armp serendip chia hacks
    promulgated logarithmic lyrical healers reformer wrongdoing inflection exogenous yolks
    eloquent brutally campfire eclectic chants sages astrophysics antagonists aptly bioenergy
    tex banished trousers effortless retraction modifiers teasing detainees residuals rustic
    rhinitis dysph debtor facilitators deflect autonomously dishwasher compounding guts quirks
    cytokine zooplankton misplaced postage parathyroid zombie extinguished antisem
"""
ACTION_WORDS: tuple[str, ...] = tuple(_WORDS.split())
assert len(ACTION_WORDS) == MAX_BINS and len(set(ACTION_WORDS)) == MAX_BINS
_INDEX = {word: k for k, word in enumerate(ACTION_WORDS)}


class ActionDecodeError(ValueError):
    """A malformed action: the message says why (shown to the model as an observation)."""


class ActionCodec:
    """`dims` action dimensions, `num_bins` bins each, written as ACTION_WORDS[bin]."""

    def __init__(self, num_bins: int = MAX_BINS, dims: int = 3) -> None:
        if not 2 <= num_bins <= MAX_BINS:
            raise ValueError(f"num_bins must be in 2..{MAX_BINS}, got {num_bins}")
        if dims < 1:
            raise ValueError(f"dims must be >= 1, got {dims}")
        self.num_bins = num_bins
        self.dims = dims
        self.words = ACTION_WORDS[:num_bins]

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
        """The bins of an action text; raises ActionDecodeError naming what is wrong (a word
        that is no action token, a token of a bin past `num_bins`, the wrong count)."""
        words = text.split()
        if len(words) != self.dims:
            raise ActionDecodeError(f"expected {self.dims} action tokens, got {len(words)}")
        bins = []
        for word in words:
            k = _INDEX.get(word.lower())
            if k is None:
                raise ActionDecodeError(f"'{word[:20]}' is not an action token")
            if k >= self.num_bins:
                raise ActionDecodeError(
                    f"'{word}' is bin {k}, out of range (bins 0..{self.num_bins - 1})"
                )
            bins.append(k)
        return bins

    def decode(self, text: str) -> list[float]:
        """The action values (bin centres) of an action text."""
        return [self.centre(k) for k in self.decode_bins(text)]


def action_token_ids(tokenizer: Any, num_bins: int = MAX_BINS) -> list[int]:
    """The token id of each bin's word under `tokenizer`; raises ValueError if any bin is not
    exactly one token (then actions cost several tokens per dimension)."""
    ids = []
    for k, word in enumerate(ACTION_WORDS[:num_bins]):
        encoded = list(tokenizer(" " + word, add_special_tokens=False)["input_ids"])
        if len(encoded) != 1:
            raise ValueError(f"bin {k} (' {word}') is {len(encoded)} tokens under this tokenizer")
        ids.append(encoded[0])
    return ids

"""Existing vocabulary words reserved as discrete codes: action bins, image codes.

Discrete tokens of another modality (a robot action's bins in VLA-RL and OpenVLA, an image's VQ
codes in Visual Planning) are written as one vocabulary token each. The choice here: existing
vocabulary tokens, not new special tokens. New tokens (`<a_12>`) would change the embedding
matrix of every model copy (policy, reference, critic, the vLLM engine, every exported
checkpoint of a multi-stage recipe) and start from untrained rows; reusing existing tokens
leaves the model untouched, as VLA-RL does with the last 256 tokens of its vocabulary. Code k is
CODE_WORDS[k]: the last 256 tokens of the bundled SmolLM2 vocabulary that are a whole
lower-case word with a leading space (" exfol" is token 49149, the vocabulary's last such word),
so each code is exactly one token id, and a text of codes, each word with its leading space,
parses back without ambiguity. `code_word_ids` checks a tokenizer keeps every code one token
(tests/envs/test_manipulation_env.py runs it on the bundled tokenizer); with another tokenizer
the words still parse, but may take several tokens each.
"""

from __future__ import annotations

from typing import Any

NUM_CODE_WORDS = 256
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
CODE_WORDS: tuple[str, ...] = tuple(_WORDS.split())
assert len(CODE_WORDS) == NUM_CODE_WORDS and len(set(CODE_WORDS)) == NUM_CODE_WORDS
CODE_INDEX: dict[str, int] = {word: k for k, word in enumerate(CODE_WORDS)}


class CodeParseError(ValueError):
    """Text that is not a valid sequence of codes; the message says why (an observation)."""


def parse_codes(text: str, count: int, limit: int, noun: str) -> list[int]:
    """The codes of `text` (code words separated by white space, any case): exactly `count`
    of them, each below `limit`; CodeParseError naming the first problem, the words called
    `noun`s ("action token", "image token")."""
    words = text.split()
    if len(words) != count:
        raise CodeParseError(f"expected {count} {noun}s, got {len(words)}")
    codes = []
    for word in words:
        code = CODE_INDEX.get(word.lower())
        if code is None:
            raise CodeParseError(f"'{word[:20]}' is not an {noun}")
        if code >= limit:
            raise CodeParseError(f"'{word}' is code {code}, out of range (codes 0..{limit - 1})")
        codes.append(code)
    return codes


def code_word_ids(tokenizer: Any, n: int = NUM_CODE_WORDS) -> list[int]:
    """The token id of each of the first `n` code words under `tokenizer`; raises ValueError if
    any is not exactly one token (then a code costs several tokens)."""
    ids = []
    for k, word in enumerate(CODE_WORDS[:n]):
        encoded = list(tokenizer(" " + word, add_special_tokens=False)["input_ids"])
        if len(encoded) != 1:
            raise ValueError(f"code {k} (' {word}') is {len(encoded)} tokens under this tokenizer")
        ids.append(encoded[0])
    return ids

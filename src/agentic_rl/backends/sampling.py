"""The generator's sampler: one decoding step's token per row and its behaviour logprob.

A row's token is drawn by inverse-CDF sampling with its own uniform number (backends/streams.py
`uniforms`), from softmax(logits / T) over the top-p nucleus, and its behaviour logprob is of
that same distribution (backends/hf.py HFGenerator's docstring). Pure tensor functions: the HF
generator calls them on every decoding step, tests call them on hand-made logits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def top_p_filter(
    logits: torch.Tensor, top_p: torch.Tensor, needed: bool | None = None
) -> torch.Tensor:
    """Mask tokens outside the smallest set whose probability reaches top_p (per row).

    logits [N, V], top_p [N] (on the logits' device) -> logits with -inf outside the nucleus.
    With every top_p >= 1 nothing is masked and the vocabulary sort (~17 ms a step for 16 x 49k)
    is skipped; `needed` says so from the caller's Python floats (no device sync), else it is
    read from `top_p`."""
    if needed is None:
        needed = not bool((top_p >= 1).all())
    if not needed:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = probs.cumsum(-1) - probs
    drop_sorted = mass_before >= top_p.unsqueeze(-1)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


SAMPLING_BLOCK = 256
"""Vocabulary entries per block of the two-level inverse CDF in `draw_tokens`."""


def sample_step(
    logits: torch.Tensor,
    temperatures: Sequence[float],
    top_ps: Sequence[float],
    u: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoding step: logits [N, V] of the live rows, each row's temperature and top-p and
    its uniform number u [N] (float64, on the CPU: backends/streams.py `uniforms`)
    -> (sampled token ids [N], their behaviour logprobs [N]), both on the logits' device.

    The behaviour logprob is of the distribution the token was drawn from, softmax(logits / T)
    over the top-p nucleus (HFGenerator's docstring); a greedy row (T <= 0) takes the argmax and
    reports its temperature-1 logprob. Every tensor made here follows `logits.device` (a CUDA
    generator's logits meet no CPU tensor); which branch runs is decided on the Python floats,
    so no value is read back from the device. A row's token depends only on its own logits and
    its own u: never on the other rows of the step (`draw_tokens`)."""
    device = logits.device
    logprob_all, probs, sampled_lp = sampling_distribution(logits, temperatures, top_ps)
    choice = draw_tokens(probs, u)
    # The behaviour logprob: of the distribution the token was drawn from (class doc).
    chosen_lp = sampled_lp.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
    if any(t <= 0 for t in temperatures):
        greedy = torch.tensor([t <= 0 for t in temperatures], device=device)
        choice = torch.where(greedy, logits.argmax(-1), choice)
        at_one = logprob_all.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
        chosen_lp = torch.where(greedy, at_one, chosen_lp)
    return choice, chosen_lp


def sampling_distribution(
    logits: torch.Tensor, temperatures: Sequence[float], top_ps: Sequence[float]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The distributions of one decoding step, logits [N, V] -> three [N, V] tensors: the
    temperature-1 logprobs (what a greedy row reports), and the probabilities and logprobs of
    the distribution tokens are drawn from, softmax(logits / T) over the top-p nucleus
    (-inf logprob, 0 probability outside it)."""
    logprob_all = torch.log_softmax(logits, dim=-1)
    if all(t == 1 for t in temperatures) and all(p >= 1 for p in top_ps):
        return logprob_all, logprob_all.exp(), logprob_all  # the policy itself
    t = torch.tensor(temperatures, dtype=torch.float32, device=logits.device).unsqueeze(-1)
    top_p = torch.tensor(top_ps, dtype=torch.float32, device=logits.device)
    nucleus = any(p < 1 for p in top_ps)
    scaled = top_p_filter(logits / t.clamp(min=1e-5), top_p, needed=nucleus)
    return logprob_all, torch.softmax(scaled, dim=-1), torch.log_softmax(scaled, dim=-1)


def sampling_entropy(
    logits: torch.Tensor, temperatures: Sequence[float], top_ps: Sequence[float]
) -> torch.Tensor:
    """The entropy (nats) of the distribution each row's token is drawn from, the one its
    behaviour logprob is of: H = -sum_v p_v log p_v over softmax(logits / T) renormalised on the
    top-p nucleus; a greedy row (T <= 0) reports the temperature-1 distribution's, as its
    logprob. logits [N, V] -> [N]. Computed only where a request asks for it
    (`SamplingParams.entropy_tokens`): one more softmax over the vocabulary per step."""
    logprob_all, probs, _ = sampling_distribution(logits, temperatures, top_ps)
    entropy = torch.special.entr(probs).sum(-1)  # entr(0) = 0 outside the nucleus
    if any(t <= 0 for t in temperatures):
        greedy = torch.tensor([t <= 0 for t in temperatures], device=logits.device)
        entropy = torch.where(greedy, torch.special.entr(logprob_all.exp()).sum(-1), entropy)
    return entropy


def draw_tokens(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: probs [N, V] and one uniform number per row
    u [N] (float64, any device: moved to the probabilities') -> token ids [N] (on the
    probabilities' device): the token where the row's CDF first exceeds u times its total.

    One uniform number per row, where torch.multinomial draws one per vocabulary entry (11 ms a
    step for 16 x 49k on the 2-core CPU, measured). The CDF is two-level, in float64 (rounding
    cannot move mass between tokens; zero-probability tokens, outside top-p, are never chosen):
    the sums of blocks of SAMPLING_BLOCK entries locate the block, a cumulative sum inside that
    block the token. A cumulative sum over the whole vocabulary is a sequential scan: 3.6 ms a
    step for 16 x 49k, ~70% of sampling (measured); the block sums are one vectorised pass."""
    rows, vocab = probs.shape
    pad = -vocab % SAMPLING_BLOCK
    blocks = nn.functional.pad(probs, (0, pad)).view(rows, -1, SAMPLING_BLOCK)
    mass = blocks.sum(-1).double()  # [N, V / block]; zero exactly when the block is all zeros
    cdf = mass.cumsum(-1)
    u = u.to(device=probs.device, dtype=torch.float64).view(rows, 1) * cdf[:, -1:]
    block = torch.searchsorted(cdf, u, right=True).clamp(max=cdf.shape[-1] - 1)  # [N, 1]
    before = cdf.gather(-1, block) - mass.gather(-1, block)  # mass of the earlier blocks
    inner = blocks[torch.arange(rows, device=probs.device), block.squeeze(-1)]
    inner = inner.double().cumsum(-1)  # [N, block]
    # Within [0, the block's own float64 total): the float32 block sums cannot push the draw
    # past the block's last nonzero entry onto a zero-probability token.
    below = torch.nextafter(inner[:, -1:], torch.zeros_like(inner[:, -1:]))
    rest = torch.minimum((u - before).clamp(min=0), below)
    offset = torch.searchsorted(inner, rest, right=True)
    return (block * SAMPLING_BLOCK + offset).squeeze(-1).clamp(max=vocab - 1)

"""What every generator checks of a `generate` call before it decodes (backends/base.py's
protocol): one sampling setting per prompt, one picture list per prompt where pictures come."""

from __future__ import annotations

from collections.abc import Sequence

from agentic_rl.types import ImageRef, SamplingParams


def params_per_prompt(
    prompts: Sequence[Sequence[int]],
    params: SamplingParams | Sequence[SamplingParams],
    images: Sequence[Sequence[ImageRef]] | None = None,
) -> list[SamplingParams]:
    """The call's sampling settings, one per prompt (a single one is shared by all); a
    ValueError naming the counts where the params or the image lists do not match the prompts."""
    if isinstance(params, SamplingParams):
        params = [params] * len(prompts)
    if len(params) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
    if images is not None and len(images) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(images)} image lists")
    return list(params)

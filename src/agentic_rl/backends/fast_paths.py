"""The bf16 generator's fast paths, chosen on the machine that runs them.

A bf16 decoding step on a CPU can run its linear layers on oneDNN-prepacked weights
(packed_linear.py) or plain `F.linear`, and its attention on the matmul attention
(model/attention.py) or PyTorch's SDPA. Which combination is fastest depends on the CPU (its
bf16 instructions, cache sizes, the oneDNN build), so the generator times each once on a
decoding step of the bench's shape when it makes its bf16 copy (`measure_fast_paths`) and keeps
the default - what was fastest where it was tuned - unless another is clearly faster
(`choose_fast_path`). Packing is bit-equal; the two attentions differ by bfloat16 rounding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.packed_linear import BF16_FLAGS, PackedLinear, native_bf16
from agentic_rl.model.attention import NAME as MATMUL_ATTENTION

log = logging.getLogger(__name__)

FastPath = tuple[bool, str]
"""A bf16 decoding configuration: (oneDNN-prepacked linears?, attention implementation)."""

MEASURE_MIN_PARAMS = 20_000_000
"""Smallest model whose bf16 fast paths are chosen by measurement. Below it a decoding step is
per-operation overhead whatever the kernels (and a test model keeps the defaults, so its
outputs do not depend on timings)."""
MEASURE_CONTEXT = 96
"""KV positions of the measured decoding step (the bench's prompts are ~85 tokens)."""
MEASURE_REPEATS = 3
"""Timed repetitions per candidate (after one warm-up), interleaved; the minimum counts."""
CHOICE_MARGIN = 0.05
"""Another candidate replaces the default only if it is this much faster (noise guard)."""


def choose_fast_path(
    seconds: Mapping[FastPath, float], default: FastPath, margin: float = CHOICE_MARGIN
) -> FastPath:
    """The fastest candidate of `seconds` (candidate -> its best measured decoding step), but the
    default unless the fastest beats it by more than `margin` (a fraction): a shared machine's
    noise should not flip a choice that was measured to pay on the machine it was tuned on."""
    if default not in seconds:
        raise ValueError(f"the default {default} was not measured: {sorted(seconds)}")
    best = min(seconds, key=lambda c: seconds[c])
    return best if seconds[best] < (1 - margin) * seconds[default] else default


def device_is_cpu(model: nn.Module) -> bool:
    return next(model.parameters()).device.type == "cpu"


def set_fast_path(
    model: nn.Module,
    packed_layers: Sequence[PackedLinear],
    packed_weights: Sequence[torch.Tensor | None],
    path: FastPath,
) -> None:
    """Put `model` (the bf16 copy) on `path`: each packed layer gets its packed weight back
    (from `packed_weights`, so switching costs no re-packing) or None (it then runs
    `F.linear`), and the copy's own config gets the attention."""
    packed, attention = path
    for layer, weight in zip(packed_layers, packed_weights, strict=True):
        layer.packed = weight if packed else None
    if model.config._attn_implementation != attention:
        model.config._attn_implementation = attention


def time_decoding_step(
    model: nn.Module,
    rows: int,
    cache_kw: str,
    keep_kw: str | None,
    pad_token_id: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds of one decoding forward of `rows` rows over a KV cache of MEASURE_CONTEXT
    positions (zero keys and values: the kernels' time does not depend on the values; one
    left-padding position in every other row, as a batch of prompts of different lengths
    has), called as the generator calls the model (`cache_kw`: its cache keyword, `keep_kw`:
    "logits_to_keep" where the model takes it)."""
    from transformers import DynamicCache

    config = model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    cache = DynamicCache()
    shape = (rows, kv_heads, MEASURE_CONTEXT, dim)
    for layer in range(config.num_hidden_layers):
        zeros = torch.zeros(shape, dtype=torch.bfloat16)
        cache.update(zeros, torch.zeros(shape, dtype=torch.bfloat16), layer)
    attn = torch.ones((rows, MEASURE_CONTEXT + 1), dtype=torch.long)
    attn[::2, 0] = 0
    ids = torch.full((rows, 1), pad_token_id, dtype=torch.long)
    positions = torch.full((rows, 1), MEASURE_CONTEXT, dtype=torch.long)
    kwargs: dict[str, Any] = {cache_kw: cache}
    if keep_kw:
        kwargs[keep_kw] = 1
    with torch.no_grad():
        start = clock()
        model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **kwargs)
        return clock() - start


def measure_fast_paths(
    model: nn.Module,
    packed_layers: Sequence[PackedLinear],
    rows: int,
    time_step: Callable[[nn.Module, int], float],
    enabled: bool = True,
) -> dict[str, Any]:
    """Pick the bf16 copy `model`'s fast paths on this machine and leave it on them.

    Candidates: prepacked linears or not (when `packed_layers` is not empty: packing was
    available), the matmul attention or SDPA (when the model is set to the matmul attention).
    Each is timed by `time_step(model, rows)` (`time_decoding_step` with the generator's
    keywords), one warm-up round then MEASURE_REPEATS interleaved rounds, the minimum counting;
    `choose_fast_path` keeps the default (packed, the model's attention) unless another is
    clearly faster. Nothing is measured when disabled, off the CPU, with a single candidate or
    for a model under MEASURE_MIN_PARAMS; a measurement that fails (an architecture the
    synthetic step does not fit) keeps the default with a warning. The copy's config is its
    own, so switching its attention leaves the learner's model alone.

    Returns the record the generator keeps in `fast_paths`: `packed_weights`, `attention`,
    `native_bf16`, `chosen_by` and, when measured, `step_ms` per candidate. When it says
    `packed_weights: False` the packed layers run plain and need no re-packing."""
    attention = getattr(getattr(model, "config", None), "_attn_implementation", None)
    default: FastPath = (bool(packed_layers), str(attention))
    record: dict[str, Any] = {
        "packed_weights": default[0],
        "attention": default[1],
        "native_bf16": native_bf16(),
        "chosen_by": "default",
    }
    on_cpu = device_is_cpu(model)
    if not record["native_bf16"] and on_cpu:
        log.warning(
            "bf16 generation on a CPU without native bfloat16 (no %s flag): oneDNN "
            "emulates it; float32 (rollout.mixed_precision=no) may be as fast",
            " / ".join(BF16_FLAGS),
        )
    packs = [True, False] if packed_layers else [default[0]]
    attentions = [MATMUL_ATTENTION, "sdpa"] if attention == MATMUL_ATTENTION else [attention]
    candidates = [(p, str(a)) for p in packs for a in attentions]
    if not enabled or len(candidates) == 1 or not on_cpu:
        return record
    if sum(p.numel() for p in model.parameters()) < MEASURE_MIN_PARAMS:
        record["chosen_by"] = f"default (model under {MEASURE_MIN_PARAMS:,} parameters)"
        return record
    packed_weights = [layer.packed for layer in packed_layers]
    best: dict[FastPath, float] = {}
    try:
        for repeat in range(MEASURE_REPEATS + 1):  # interleaved; repeat 0 warms up
            for candidate in candidates:
                set_fast_path(model, packed_layers, packed_weights, candidate)
                seconds = time_step(model, rows)
                if repeat:
                    best[candidate] = min(best.get(candidate, float("inf")), seconds)
    except Exception as err:  # an architecture the synthetic step does not fit
        set_fast_path(model, packed_layers, packed_weights, default)
        record["chosen_by"] = f"default (measurement failed: {err!r})"
        log.warning("bf16 generator fast paths: %s", record["chosen_by"])
        return record
    chosen = choose_fast_path(best, default)
    set_fast_path(model, packed_layers, packed_weights, chosen)
    record.update(
        packed_weights=chosen[0],
        attention=chosen[1],
        chosen_by="measurement",
        step_ms={f"{'packed' if p else 'plain'}+{a}": 1000 * t for (p, a), t in best.items()},
    )
    log.info("bf16 generator fast paths: %s", record)
    return record

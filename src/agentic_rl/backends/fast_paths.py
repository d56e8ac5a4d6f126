"""The generator's fast paths, chosen on the machine that runs them.

Two decisions, each made once when the generator builds its compute model, by checking and
timing a decoding step of the bench's shape: which bf16 kernels the copy runs
(`measure_fast_paths`), and whether the decoder layers run as the compiled step of compiled.py
(`choose_compiled_decode`: it must agree with the model's forward before it is timed).

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
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.compiled import CompiledDecoder, StaticKV, unsupported_reason, warn_once
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


@dataclass(frozen=True)
class Probe:
    """The decoding step `choose_compiled_decode` checks and times: `rows` rows of
    MEASURE_CONTEXT random tokens (one left-padding column in every other row) as the context,
    then one random token per row."""

    prompt: torch.Tensor  # [B, C]
    prompt_attn: torch.Tensor  # [B, C]
    ids: torch.Tensor  # [B, 1]
    attn: torch.Tensor  # [B, C + 1]
    positions: torch.Tensor  # [B, 1]

    @classmethod
    def make(cls, vocab: int, rows: int, context: int = MEASURE_CONTEXT) -> Probe:
        gen = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, vocab, (rows, context), generator=gen)
        ids = torch.randint(0, vocab, (rows, 1), generator=gen)
        attn = torch.ones((rows, context + 1), dtype=torch.long)
        attn[::2, 0] = 0
        positions = torch.full((rows, 1), context - 1, dtype=torch.long)
        positions[1::2] = context
        return cls(prompt, attn[:, :context], ids, attn, positions)

    def own_kv(self, step: Reference) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The KV a model computes for the prompt (its own forward `step`, a fresh cache)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        positions = (self.prompt_attn.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            step(self.prompt, self.prompt_attn, positions, cache)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def forward_logits(self, step: Reference) -> torch.Tensor:
        """The decoding step's logits [B, V] on a model's own forward over its own KV."""
        with torch.no_grad():
            return step(
                self.ids, self.attn, self.positions, _filled_cache(self.own_kv(step), False)
            )


def sampled_logprob_error(exact: torch.Tensor, logits: torch.Tensor) -> float:
    """How far a path's logprobs are from `exact`'s where tokens are sampled: the largest over
    rows of E_{v ~ softmax(exact)} |log p(v) - log p_exact(v)| (nats). logits [B, V] both.
    The maximum over the whole vocabulary would be ruled by tokens of probability 1e-9, whose
    logprobs bf16 rounding moves by tenths of a nat on any path."""
    exact_lp = torch.log_softmax(exact.float(), -1)
    gap = (torch.log_softmax(logits.float(), -1) - exact_lp).abs()
    return float((exact_lp.exp() * gap).sum(-1).max())


AGREEMENT_FACTOR = 1.5
"""The compiled step may be this many times as far from the exact (float32) logits as the
model's own forward in the same precision is, plus `agreement_tolerance`."""


def agreement_tolerance(dtype: torch.dtype) -> float:
    """What float rounding may part the compiled step from the forward, not a different model.
    float32: the largest |logprob| difference over the vocabulary between the two paths (both
    round the same way, to ~1e-5). Lower precision: the allowance (nats, `sampled_logprob_error`)
    on top of AGREEMENT_FACTOR x the forward's own error from the exact model. Measured on the
    bundled model over its own KV (96 positions, 8 rows): float32 compiled vs forward 3e-5 over
    the vocabulary (random keys and values instead: 1.3e-3); bfloat16 forward vs the float32
    forward 0.055, compiled bfloat16 vs it 0.061 (inductor keeps fused intermediates in float32,
    the forward rounds each operator's output to bfloat16: another rounding, as close to the
    float32 model; without a float32 model at hand, compiled vs forward in bfloat16 is 0.078: both
    roundings); an unsupported variant of the architecture is off by whole nats."""
    return 1e-3 if dtype == torch.float32 else 0.15


Reference = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Any], torch.Tensor]
"""A model's own forward step: (ids [B, T], attention mask [B, C + T], positions [B, T], a
DynamicCache of C columns, filled in place) -> float32 logits [B, V] of the last position (the
generator's `_reference_step`)."""


def choose_compiled_decode(
    model: nn.Module,
    mode: str,
    rows: int,
    reference: Reference,
    clock: Callable[[], float] = time.perf_counter,
    exact: Reference | None = None,
) -> tuple[CompiledDecoder | None, dict[str, Any]]:
    """Decide whether the generator decodes `model` (its compute model) through a
    `CompiledDecoder`, as fast_paths.py decides its bf16 paths, on a decoding step of `rows`
    rows after MEASURE_CONTEXT positions of the model's own KV (`Probe`: random tokens prefilled
    by `reference`; random keys and values instead make a 30-layer model's attention chaotic,
    so two roundings part by whole nats and the check says nothing). Each path runs the step
    once (the compiled one compiles then: `compile_s`) and they must agree
    (`agreement_tolerance`): in float32 logprob for logprob; in lower precision, where each
    path rounds its own way, the compiled step must be about as close to the `exact` model (the
    float32 master of a bf16 compute copy; `reference` itself when None) as the forward is
    (`sampled_logprob_error`), else it is refused with a warning. For mode "auto" both are
    then timed over MEASURE_REPEATS interleaved rounds, the minimum counting: the compiled step
    is kept only if it beats the model's forward by more than CHOICE_MARGIN. Mode "always"
    keeps it whenever it compiles and agrees; "never" does not build it. "auto" keeps the
    model's forward without measuring for models under MEASURE_MIN_PARAMS (compiling would
    cost more than it saves, and a test model's outputs do not depend on timings).

    `mode` is one of config/validate_engines.py's COMPILED_DECODE (HFGenerator checks it).
    Returns (the decoder or None, the record the generator keeps in `compiled_decode`:
    `used`, `chosen_by`, and when run `compile_s`, `max_logprob_diff` (compiled vs forward,
    over the whole vocabulary), `sampled_error` ({"compiled", "forward"}: each path's
    `sampled_logprob_error` from the exact model), `step_ms`)."""
    record: dict[str, Any] = {"used": False, "mode": mode}
    if mode == "never":
        record["chosen_by"] = "off (compiled_decode=never)"
        return None, record
    reason = unsupported_reason(model)
    if reason is not None:
        record["chosen_by"] = f"unsupported: {reason}"
        log.info("compiled decoding step not used: %s", reason)
        return None, record
    if mode == "auto" and sum(p.numel() for p in model.parameters()) < MEASURE_MIN_PARAMS:
        record["chosen_by"] = f"default (model under {MEASURE_MIN_PARAMS:,} parameters)"
        return None, record
    decoder = CompiledDecoder(model)
    dtype = next(model.parameters()).dtype
    probe = Probe.make(model.config.vocab_size, rows)
    kv = probe.own_kv(reference)

    def run(compiled: bool) -> tuple[float, torch.Tensor]:
        cache = _filled_cache(kv, compiled)
        with torch.no_grad():
            start = clock()
            if compiled:
                logits = decoder.step(probe.ids, probe.attn, probe.positions, cache)
            else:
                logits = reference(probe.ids, probe.attn, probe.positions, cache)
            return clock() - start, logits

    try:
        _, compiled_logits = run(True)  # compiles
        # A single row is the one batch size dynamo specialises (a second graph): compile it
        # now, when the last row of a call would otherwise pay for it, and count it.
        single = clock()
        with torch.no_grad():
            one_row = [(k[:1], v[:1]) for k, v in kv]
            decoder.step(
                probe.ids[:1], probe.attn[:1], probe.positions[:1], _filled_cache(one_row, True)
            )
        compile_s = (decoder.compile_s or 0.0) + clock() - single
    except Exception:  # decoder.step warned once and says why in `broken`
        record["chosen_by"] = f"failed: {decoder.broken}"
        return None, record
    record["compile_s"] = compile_s
    _, reference_logits = run(False)
    exact_logits = reference_logits if exact is None else probe.forward_logits(exact)
    record["max_logprob_diff"] = (
        (torch.log_softmax(compiled_logits, -1) - torch.log_softmax(reference_logits, -1))
        .abs()
        .max()
        .item()
    )
    errors = {
        "compiled": sampled_logprob_error(exact_logits, compiled_logits),
        "forward": sampled_logprob_error(exact_logits, reference_logits),
    }
    record["sampled_error"] = errors
    if dtype == torch.float32:  # one rounding: the two paths agree token for token
        gap, allowed = record["max_logprob_diff"], agreement_tolerance(dtype)
        measure = "its logprobs differ from the forward's by"
    else:  # two roundings: each path as close to the exact model as the other
        gap = errors["compiled"]
        allowed = AGREEMENT_FACTOR * errors["forward"] + agreement_tolerance(dtype)
        measure = (
            f"the forward's sampled tokens' logprobs are {errors['forward']:.3g} nats from "
            "the exact model's, its"
        )
    if not gap <= allowed:  # NaN included
        decoder.broken = (
            f"disagrees with the model's forward: {measure} {gap:.3g} nats (allowed {allowed:.3g})"
        )
        record["chosen_by"] = f"failed: {decoder.broken}"
        warn_once(f"compiled decoding step not used: {decoder.broken}")
        return None, record
    if mode == "always":
        record.update(used=True, chosen_by="forced (compiled_decode=always)")
        return decoder, record
    best = {True: float("inf"), False: float("inf")}
    for _ in range(MEASURE_REPEATS):  # interleaved; the first calls above warmed both up
        for compiled in (True, False):
            best[compiled] = min(best[compiled], run(compiled)[0])
    used = best[True] < (1 - CHOICE_MARGIN) * best[False]
    record.update(
        used=used,
        chosen_by="measurement",
        step_ms={"compiled": 1000 * best[True], "model_forward": 1000 * best[False]},
    )
    log.info("compiled decoding step: %s", record)
    return (decoder if used else None), record


def _filled_cache(kv: list[tuple[torch.Tensor, torch.Tensor]], static: bool) -> Any:
    """A fresh cache holding `kv` (each run writes into its cache): static or DynamicCache."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k.clone(), v.clone(), i)
    return StaticKV.adopt(cache, 1) if static else cache

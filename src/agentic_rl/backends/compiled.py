"""A compiled decoding step over a preallocated KV cache, for the CPU generator.

A decoding step of a small model on a CPU is per-operation overhead, not arithmetic: the bundled
30-layer SmolLM2-135M runs ~450 small operators a step, and its bf16 step sits at 15% of the
memory bandwidth and 16% of the GEMM roof (bench/results/cpu_limit.json). This module runs the
decoder layers as one `torch.compile`d (inductor) function: the RMSNorms, the rotary embedding,
the cache write, the grouped-query attention with its float32 softmax and the SiLU gate fuse
into a few C++ kernels per layer, and the KV cache is preallocated for the whole call
(`StaticKV`), so a step writes one column instead of re-concatenating every layer's cache.

What keeps compiling cheap on 2 cores: one layer is compiled and called for every layer (its
weights, cache and inputs are arguments, not constants), so a 30-layer model compiles one
layer's graph; the batch and cache-length dimensions are dynamic, so rows leaving the batch
and calls of other lengths reuse it. One graph per compute dtype (and one more for a single
row, which dynamo specialises). Weights are read at every call, never baked in, so the learner's
in-place updates are seen without recompiling.

Which models: Llama-style decoders (`SUPPORTED_TYPES`: RMSNorm, rotary embedding, grouped-query
attention, SiLU-gated MLP, plain or oneDNN-packed linear layers). Anything else - LoRA layers
injected into the projections, sliding windows, vision-language models, a GPU - decodes on the
model's own forward as before (`unsupported_reason` says why). Where compiling fails (no C++
compiler, an operator inductor cannot lower) the generator says so once in the log and keeps the
model's forward (`CompiledDecoder.broken`).

The prefill, the sampler, stop handling, per-row budgets and the KV kept for a next turn stay in
the generator (backends/hf.py): `StaticKV` offers the two things it reads from a cache
(`batch_select_indices`, `layers[i].keys / values`), so prefix sharing works unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from agentic_rl.backends.fast_paths import (
    CHOICE_MARGIN,
    MEASURE_CONTEXT,
    MEASURE_MIN_PARAMS,
    MEASURE_REPEATS,
)
from agentic_rl.backends.packed_linear import PackedLinear

log = logging.getLogger(__name__)

SUPPORTED_TYPES = ("llama", "qwen2")
"""`config.model_type`s whose decoder layer `layer_step` computes (SmolLM2 is "llama")."""
CACHE_BLOCK = 64
"""Cache columns are allocated in blocks of this many (fewer distinct shapes)."""

_warned: set[str] = set()  # failures already logged in this process (one warning each)


def warn_once(message: str) -> None:
    """Log `message` as a warning the first time only: a fallback is said once, not per call."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm as Llama computes it (Zhang & Sennrich 2019): in float32,
    x / sqrt(mean(x^2) + eps), cast back to x's dtype, then times `weight`. x [..., H]."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, Llama's half-split layout):
    x cos + rotate_half(x) sin. x [B, heads, 1, D]; cos, sin [B, 1, D]."""
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + turned * sin.unsqueeze(1)


LayerWeights = tuple[torch.Tensor | None, ...]
"""One decoder layer's tensors in `layer_step`'s order: input norm, q, q bias, k, k bias, v,
v bias, o, o bias, post-attention norm, gate, gate bias, up, up bias, down, down bias."""


def layer_step(
    h: torch.Tensor,
    w: LayerWeights,
    keys: torch.Tensor,
    values: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor,
    slot: torch.Tensor,
    eps: float,
    heads: int,
    scaling: float,
) -> torch.Tensor:
    """One Llama decoder layer for one new token per row, writing its key and value into the
    preallocated cache. The function `torch.compile` compiles (once for every layer).

    h [B, 1, H] the residual stream; keys, values [B, Hkv, T, D] (written in place at column
    `slot` [1]); cos, sin [B, 1, D]; mask [B, T] bool (True = attend; the new column included).
    Attention: softmax(q k^T * scaling) v over the allowed columns, query head j reading key head
    j // (heads / Hkv), softmax in float32 (as model/attention.py). Returns h [B, 1, H]."""
    ln1, wq, bq, wk, bk, wv, bv, wo, bo, ln2, wg, bg, wu, bu, wd, bd = w
    rows, kv_heads, dim = h.shape[0], keys.shape[1], keys.shape[-1]
    x = rms_norm(h, ln1, eps)
    q = rotate(F.linear(x, wq, bq).view(rows, 1, heads, dim).transpose(1, 2), cos, sin)
    k = rotate(F.linear(x, wk, bk).view(rows, 1, kv_heads, dim).transpose(1, 2), cos, sin)
    v = F.linear(x, wv, bv).view(rows, 1, kv_heads, dim).transpose(1, 2)
    keys.index_copy_(2, slot, k)
    values.index_copy_(2, slot, v)
    grouped = q.reshape(rows, kv_heads, heads // kv_heads, dim)  # [B, Hkv, G, D]
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).float() * scaling  # [B, Hkv, G, T]
    scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    attended = torch.matmul(probs, values).reshape(rows, 1, heads * dim)
    h = h + F.linear(attended, wo, bo)
    x = rms_norm(h, ln2, eps)
    return h + F.linear(F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu), wd, bd)


_compiled_layer_step: Callable[..., torch.Tensor] | None = None


def compiled_layer_step() -> Callable[..., torch.Tensor]:
    """`layer_step` under torch.compile (inductor), made once per process: its compiled graphs
    are shared by every generator and model (dynamo guards on shapes and dtypes)."""
    global _compiled_layer_step
    if _compiled_layer_step is None:
        _compiled_layer_step = torch.compile(layer_step, backend="inductor", dynamic=None)
    return _compiled_layer_step


class _LayerView:
    """The filled part of one layer of a `StaticKV`, as DynamicCache's layers show it."""

    def __init__(self, cache: StaticKV, layer: int) -> None:
        self._cache, self._layer = cache, layer

    @property
    def keys(self) -> torch.Tensor:
        return self._cache.keys[self._layer][:, :, : self._cache.length]

    @property
    def values(self) -> torch.Tensor:
        return self._cache.values[self._layer][:, :, : self._cache.length]


class StaticKV:
    """A KV cache preallocated for a whole `generate` call: per layer keys and values
    [B, Hkv, T, D], of which the first `length` columns are filled (the prefill's columns, then
    one per decoding step), in the column layout of the generator's attention mask."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        self.keys, self.values, self.length = keys, values, length

    @classmethod
    def adopt(cls, cache: Any, new_columns: int) -> StaticKV:
        """The prefill's DynamicCache copied into buffers with room for `new_columns` more
        (rounded up to CACHE_BLOCK)."""
        first = cache.layers[0].keys
        length = first.shape[2]
        total = -(-(length + new_columns) // CACHE_BLOCK) * CACHE_BLOCK
        keys, values = [], []
        for layer in cache.layers:
            for source, out in ((layer.keys, keys), (layer.values, values)):
                rows, kv_heads, _, dim = source.shape
                buffer = source.new_zeros((rows, kv_heads, total, dim))
                buffer[:, :, :length] = source
                out.append(buffer)
        return cls(keys, values, length)

    @property
    def layers(self) -> list[_LayerView]:
        return [_LayerView(self, i) for i in range(len(self.keys))]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices` (finished sequences leave the batch)."""
        self.keys = [k.index_select(0, indices) for k in self.keys]
        self.values = [v.index_select(0, indices) for v in self.values]

    def to_dynamic(self) -> Any:
        """The filled columns as a transformers DynamicCache (to go on without the decoder)."""
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, view in enumerate(self.layers):
            cache.update(view.keys.clone(), view.values.clone(), i)
        return cache


def unsupported_reason(model: nn.Module) -> str | None:
    """Why `layer_step` cannot stand in for `model`'s decoder layers (None: it can)."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_TYPES:
        return f"model type {model_type!r} (supported: {', '.join(SUPPORTED_TYPES)})"
    if next(model.parameters()).device.type != "cpu":
        return "not on the CPU"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (supported: silu)"
    if getattr(config, "sliding_window", None) is not None and getattr(
        config, "use_sliding_window", True
    ):
        return "sliding-window attention"
    inner = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm", "rotary_emb")
    if inner is None or not all(hasattr(inner, p) for p in parts):
        return "not a Llama-style decoder (model.model.{embed_tokens,layers,norm,rotary_emb})"
    linears = [getattr(model, "lm_head", None)]
    for layer in inner.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if any(hasattr(attn, extra) for extra in ("q_norm", "k_norm", "sinks")):
            return "attention with query/key norms or sinks"
        linears += [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj]
        linears += [mlp.gate_proj, mlp.up_proj, mlp.down_proj]
    odd = {type(m).__name__ for m in linears if type(m) not in (nn.Linear, PackedLinear)}
    if odd:  # e.g. LoRA layers: their adapters would be skipped
        return f"projection layers of type {', '.join(sorted(odd))}"
    return None


def _layer_weights(layer: nn.Module) -> LayerWeights:
    attn, mlp = layer.self_attn, layer.mlp
    out: list[torch.Tensor | None] = [layer.input_layernorm.weight]
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj):
        out += [proj.weight, proj.bias]
    out.append(layer.post_attention_layernorm.weight)
    for proj in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        out += [proj.weight, proj.bias]
    return tuple(out)


@dataclass
class StepShape:
    """What `CompiledDecoder` reads off the model once."""

    heads: int
    kv_heads: int
    head_dim: int
    eps: float
    scaling: float


class CompiledDecoder:
    """Decoding steps of a supported model (`unsupported_reason` is None) through the compiled
    `layer_step`: the embedding, the rotary table and the output head run as the model runs them
    (the head keeps its oneDNN-packed weight in the bf16 copy), the layers compiled.

    `step` returns the last position's logits as the model's forward would (float32 [B, V]),
    up to float rounding. The first call compiles (seconds to a minute on 2 cores: `compile_s`);
    if compiling or running fails the decoder marks itself `broken`, warns once and the caller
    falls back to the model's forward."""

    def __init__(self, model: nn.Module, compile_fn: Callable[[], Callable] | None = None) -> None:
        self.model = model
        inner = model.model
        attn = inner.layers[0].self_attn
        config = model.config
        heads = config.num_attention_heads
        self.shape = StepShape(
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=attn.head_dim,
            eps=float(inner.layers[0].input_layernorm.variance_epsilon),
            scaling=float(attn.scaling),
        )
        # The parameter objects, read once: weight updates write into them in place (the
        # learner's optimizer, load_state_dict, the bf16 copy's re-cast), so every step reads
        # the current values without rebuilding 16 x layers attribute lookups.
        self._weights = [_layer_weights(layer) for layer in inner.layers]
        self._compile_fn = compile_fn or compiled_layer_step
        self._step_fn: Callable[..., torch.Tensor] | None = None
        self.broken: str | None = None
        self.compile_s: float | None = None  # the first call's seconds (compiling included)

    def step(
        self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, cache: StaticKV
    ) -> torch.Tensor:
        """One decoding step: ids [B, 1] at positions [B, 1], attention mask [B, C] over the
        cache's columns plus the new one (C = cache.length + 1); writes column cache.length and
        advances it. Returns float32 logits [B, V]. Raises whatever compiling raised (after
        marking the decoder broken); the caller then redoes the step on the model's forward."""
        model, shape = self.model, self.shape
        inner = model.model
        h = inner.embed_tokens(ids)  # [B, 1, H]
        cos, sin = inner.rotary_emb(h, positions)  # [B, 1, D] each
        total = cache.keys[0].shape[2]
        mask = torch.zeros((ids.shape[0], total), dtype=torch.bool, device=ids.device)
        mask[:, : attn.shape[1]] = attn.bool()
        slot = torch.tensor([cache.length], device=ids.device)
        first = self._step_fn is None
        start = time.perf_counter()
        try:
            if first:
                self._step_fn = self._compile_fn()
            fn = self._step_fn
            # Batch and cache length vary between calls: whichever step compiles (always at
            # the first layer: every layer has the same shapes) compiles them dynamic.
            marks = [(h, 0), (cos, 0), (sin, 0), (mask, 0), (mask, 1)]
            marks += [(t, d) for t in (cache.keys[0], cache.values[0]) for d in (0, 2)]
            for tensor, dim in marks:
                torch._dynamo.maybe_mark_dynamic(tensor, dim)
            for i, weights in enumerate(self._weights):
                keys, values = cache.keys[i], cache.values[i]
                h = fn(
                    h,
                    weights,
                    keys,
                    values,
                    cos,
                    sin,
                    mask,
                    slot,
                    shape.eps,
                    shape.heads,
                    shape.scaling,
                )
        except Exception as err:  # no compiler, an op inductor cannot lower, ...
            self.broken = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
            self._step_fn = None
            warn_once(
                "compiled decoding step unavailable, decoding on the model's forward instead "
                f"({self.broken})"
            )
            raise
        if first:
            self.compile_s = time.perf_counter() - start
        cache.length += 1
        return model.lm_head(inner.norm(h))[:, -1, :].float()


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

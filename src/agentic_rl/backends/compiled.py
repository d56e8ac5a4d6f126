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
attention, SiLU-gated MLP, plain or oneDNN-packed linear layers). In a bf16 copy whose linears
are packed (packed_linear.py) the compiled layer multiplies by the packed weights, through a
custom operator inductor calls as it is, so compiling does not give up what packing saves.
Anything else - LoRA layers
injected into the projections, sliding windows, vision-language models, a GPU - decodes on the
model's own forward as before (`unsupported_reason` says why). Where compiling fails (no C++
compiler, an operator inductor cannot lower) the generator says so once in the log and keeps the
model's forward (`CompiledDecoder.broken`). Whether a generator decodes through it at all - it
must agree with the model's forward, and be faster - is decided in fast_paths.py
(`choose_compiled_decode`).

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

from agentic_rl.backends.packed_linear import PackedLinear, packed_linear

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
v bias, o, o bias, post-attention norm, gate, gate bias, up, up bias, down, down bias. A
projection's weight is its oneDNN-packed copy where the layer is a `PackedLinear` (bf16)."""


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packed: bool
) -> torch.Tensor:
    """x W^T + b: `F.linear`, or with `packed` (weight is a oneDNN-packed bfloat16 tensor,
    `PackedLinear.packed`: oneDNN's blocked layout made once per weight version instead of on
    every call) the packed kernel, which compiled code calls as a custom operator. `packed` is
    a Python bool, not read off the tensor: under dynamo a packed tensor's fake copy does not
    say it is packed, and inductor would hand it to a plain matmul."""
    if packed:
        return packed_linear(x, weight, bias, weight.shape[0])
    return F.linear(x, weight, bias)


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
    packed: bool = False,
) -> torch.Tensor:
    """One Llama decoder layer for one new token per row, writing its key and value into the
    preallocated cache. The function `torch.compile` compiles (once for every layer; once
    more for packed weights). `packed`: the projections in `w` are oneDNN-packed (`linear`).

    h [B, 1, H] the residual stream; keys, values [B, Hkv, T, D] (written in place at column
    `slot` [1]); cos, sin [B, 1, D]; mask [B, T] bool (True = attend; the new column included).
    Attention: softmax(q k^T * scaling) v over the allowed columns, query head j reading key head
    j // (heads / Hkv), softmax in float32 (as model/attention.py). Returns h [B, 1, H]."""
    ln1, wq, bq, wk, bk, wv, bv, wo, bo, ln2, wg, bg, wu, bu, wd, bd = w
    rows, kv_heads, dim = h.shape[0], keys.shape[1], keys.shape[-1]
    x = rms_norm(h, ln1, eps)
    q = rotate(linear(x, wq, bq, packed).view(rows, 1, heads, dim).transpose(1, 2), cos, sin)
    k = rotate(linear(x, wk, bk, packed).view(rows, 1, kv_heads, dim).transpose(1, 2), cos, sin)
    v = linear(x, wv, bv, packed).view(rows, 1, kv_heads, dim).transpose(1, 2)
    keys.index_copy_(2, slot, k)
    values.index_copy_(2, slot, v)
    grouped = q.reshape(rows, kv_heads, heads // kv_heads, dim)  # [B, Hkv, G, D]
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).float() * scaling  # [B, Hkv, G, T]
    scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(torch.float32).min)
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    attended = torch.matmul(probs, values).reshape(rows, 1, heads * dim)
    h = h + linear(attended, wo, bo, packed)
    x = rms_norm(h, ln2, eps)
    gated = F.silu(linear(x, wg, bg, packed)) * linear(x, wu, bu, packed)
    return h + linear(gated, wd, bd, packed)


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


def _projections(layer: nn.Module) -> list[nn.Module]:
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj] + [
        mlp.gate_proj,
        mlp.up_proj,
        mlp.down_proj,
    ]


def is_packed(layer: nn.Module) -> bool:
    """Does every projection of the decoder layer hold a oneDNN-packed weight right now (a
    `PackedLinear` whose packing the generator's fast-path choice left on)?"""
    return all(isinstance(p, PackedLinear) and p.packed is not None for p in _projections(layer))


def _layer_weights(layer: nn.Module, packed: bool = False) -> LayerWeights:
    """The layer's tensors in `layer_step`'s order; with `packed`, the projections' packed
    weights."""
    q, k, v, o, gate, up, down = _projections(layer)
    out: list[torch.Tensor | None] = [layer.input_layernorm.weight]
    for proj in (q, k, v, o):
        out += [proj.packed if packed else proj.weight, proj.bias]
    out.append(layer.post_attention_layernorm.weight)
    for proj in (gate, up, down):
        out += [proj.packed if packed else proj.weight, proj.bias]
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
        # the current values without rebuilding 16 x layers attribute lookups. Packed
        # weights are the exception: `repack()` replaces them with each weight version and
        # the fast-path choice may switch them off, so a model with packed layers reads them
        # at every step.
        self._layers = list(inner.layers)
        self._weights = [_layer_weights(layer) for layer in self._layers]
        self._has_packed = any(
            isinstance(m, PackedLinear) for layer in self._layers for m in layer.modules()
        )
        self._packed = [False] * len(self._layers)
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
            if self._has_packed:
                self._packed = [is_packed(layer) for layer in self._layers]
                self._weights = [
                    _layer_weights(layer, packed)
                    for layer, packed in zip(self._layers, self._packed, strict=True)
                ]
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
                    self._packed[i],
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

"""The CPU generator: batched sampling with a KV cache over plain Hugging Face models.

Token ids in, token ids and behaviour logprobs out. Sequences that finish (end of sequence, a stop
string such as an action end tag, or their token budget) leave the batch at once, so the cost of a
step follows the number of live sequences, not the longest one.
"""

from __future__ import annotations

import copy
import inspect
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.compiled import CompiledDecoder, StaticKV
from agentic_rl.backends.fast_paths import (
    choose_compiled_decode,
    measure_fast_paths,
    time_decoding_step,
)
from agentic_rl.backends.kv_store import Hit, KVStore, load_past, row_kv
from agentic_rl.backends.packed_linear import PackedLinear, pack_linears
from agentic_rl.backends.requests import params_per_prompt
from agentic_rl.backends.sampling import sample_step, sampling_entropy
from agentic_rl.backends.streams import row_keys, stream_key, uniforms
from agentic_rl.config.validate_engines import COMPILED_DECODE
from agentic_rl.model.attention import register_if_used
from agentic_rl.model.lora import active_adapters, adapter_names, set_active_adapters
from agentic_rl.model.prefix_sharing import cache_keyword
from agentic_rl.model.vision import Qwen2VLSpec, never_sampled_ids, spec_of_model, vision_inputs
from agentic_rl.model.vocab_logprobs import mask_logits
from agentic_rl.types import Completion, ImageRef, SamplingParams


def _layered_cache_available() -> bool:
    from transformers import DynamicCache

    return hasattr(DynamicCache(), "layers")


class HFGenerator:
    """`Generator` over a transformers causal LM living in this process.

    The model object is shared with the learner, on its device (trainer.device: the CPU, or the
    GPU, where sampling then runs too), so `update_weights` has nothing to copy
    (it accepts a state dict for generators that own a separate copy). `logprobs` are the
    behaviour logprobs: under the distribution each token was drawn from, softmax(logits / T)
    renormalised over the top-p nucleus (vLLM's "processed_logprobs"). The learner computes its
    logprobs at the same temperature (model/load.py `token_logprobs`), so with top_p = 1 the two
    are one distribution and differ only by numerics (precision, engine). With top_p < 1 the
    learner's pi (the whole vocabulary) puts mass Z < 1 on the nucleus, so every sampled token
    has pi / pi_behav = Z <= 1: the samples are off-policy for pi, which the rollout correction
    (algo.rollout_correction, on by default then) weighs; tokens outside the nucleus are never
    drawn, a bias no weight removes. Greedy requests (temperature 0) report temperature 1.

    Seeds: each row samples from its own stream (backends/streams.py): its request's seed,
    told apart from earlier rows of the call with the same seed, keys a counter-based hash that
    gives the uniform number of each sampled position, so a row's tokens depend on its own
    logits and key only, never on the other rows of the call or their order (the rollout
    actor seeds each episode's turn: rollout/episode.py `turn_seed`). Unseeded rows get fresh
    keys, never the global torch RNG. The KV of each finished row is kept, keyed and verified
    by the tokens it was computed on, so an episode that comes back in another call reuses it,
    and a prompt that shares a prefix with a kept row (a tree branch and its parent) reuses the
    KV of that prefix (backends/kv_store.py; `kv_rows` widens its bound).

    Images (a vision-language model, model/vision.py): `generate(..., images=)` gives each
    prompt's images in the order of its placeholder tokens; their pixel values go into the
    prefill, where the model puts the image features into the KV cache, so decoding steps need
    none. A prompt with images reuses the stored KV of an earlier turn only if that turn's
    pictures (by hash) are the first of its own (equal placeholder tokens may stand for other
    pictures); the new turn's pictures go into the prefill of its suffix. A vision-language
    model never samples its image placeholder tokens (model/vision.py `never_sampled_ids`; as
    vLLM's bad words): a sampled `<image>` would claim image features that do not exist. Their
    logits are masked by `mask_logits` before sampling, the same function the learner's
    logprobs apply (`OutputHead.masked`), so both score the same distribution.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        max_batch_size: int = 64,
        eos_token_ids: Sequence[int] | None = None,
        prefix_cache: bool = True,
        mixed_precision: str = "no",
        packed_weights: bool = True,
        choose_fast_paths: bool = True,
        compiled_decode: str = "never",
        kv_rows: int = 0,
        cut_prefixes: bool = False,
    ) -> None:
        self.model = model
        register_if_used(model)  # e.g. a model unpickled in a Ray actor
        # "bf16": forward passes run on a bfloat16 copy of the parameters (see _compute_model).
        self.mixed_precision = mixed_precision
        self._bf16_model: nn.Module | None = None
        self._bf16_version = -1
        self._has_adapters = False  # the copy's LoRA adapters follow the model's active one
        # With bf16, the copy's linear layers run on oneDNN-packed weights (packed_linear.py)
        # and its attention on the model's (the matmul attention when model.fast_cpu_attention)
        # unless `choose_fast_paths` measures another combination faster on this machine
        # (backends/fast_paths.py); `fast_paths` records what was chosen and why.
        self.packed_weights = packed_weights
        self.choose_fast_paths = choose_fast_paths
        self._packed: list[PackedLinear] = []
        self.fast_paths: dict[str, Any] | None = None
        # Decoding steps through a compiled step over a preallocated KV cache
        # (backends/compiled.py): "auto" measures it against the model's forward on the first
        # call and keeps the faster, "always" / "never" force it; `compiled_decode` records
        # the choice (and the compile time) once made.
        if compiled_decode not in COMPILED_DECODE:
            raise ValueError(
                f"compiled_decode: {compiled_decode!r} is not one of {', '.join(COMPILED_DECODE)}"
            )
        self.compiled_decode_mode = compiled_decode
        self.compiled_decode: dict[str, Any] | None = None
        self._decoder: CompiledDecoder | None = None
        self._decoder_model: nn.Module | None = None
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        eos = list(eos_token_ids or [])
        if not eos and tokenizer.eos_token_id is not None:
            eos = [tokenizer.eos_token_id]
        self.eos_token_ids = set(eos)
        self._vision = spec_of_model(model)
        # A VLM's placeholder ids, never sampled (recorded on the model for the learner too).
        banned = never_sampled_ids(model, tokenizer)
        device = next(model.parameters()).device
        self._banned = torch.tensor(banned, dtype=torch.long, device=device) if banned else None
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        # transformers renamed `past_key_values` to `cache`; support both.
        params = inspect.signature(model.forward).parameters
        self._cache_kw = cache_keyword(model)
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None
        self.calls = 0  # generate() calls, for tests that count work
        self.prompt_tokens = 0  # prompt tokens run through the model (after reuse)
        self.reused_tokens = 0  # prompt tokens whose KV was kept from an earlier call
        # Multi-turn contexts only grow, so a turn's KV is kept for the episode's next call
        # (backends/kv_store.py); it is dropped whenever the weights change (`update_weights`)
        # because it would be stale. It keeps at most max(kv_rows, the widest call's rows)
        # rows' KV: `kv_rows` for callers whose calls are narrower than their episodes (a tree
        # rollout's rounds), so a parent's KV is still there for its branches.
        if kv_rows < 0:
            raise ValueError(f"kv_rows: {kv_rows} is below 0")
        self.prefix_cache = prefix_cache and _layered_cache_available()
        self._kv_store = KVStore(kv_rows, cut_prefixes)  # trees, step and memory modes (base.py)
        self._kv_weights = self._weights_version()

    def sleep(self) -> None:
        """The learner's turn (`release_for_update`): drop the KV kept for the next turn of the
        step's episodes. An update makes it stale anyway, and it is as large as the step's
        contexts (16 episodes x 512 tokens: ~0.4 GB for the bundled model in float32)."""
        self._kv_store.clear()

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Take new weights (a state dict, or None when the model object is shared with the
        learner and already updated in place). Either way cached KV is now stale, and so is the
        bf16 copy: it is re-cast at the next forward even if no version counter moved (an
        in-place write through `.data` or a fused kernel does not move them)."""
        self._kv_store.clear()
        self._bf16_version = -1
        if state is not None:
            self.model.load_state_dict(dict(state), strict=False)

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        params = params_per_prompt(prompts, params, images)
        self._kv_store.note_rows(len(prompts))  # the store's bound (`KVStore.fit`)
        out: list[Completion] = []
        for start in range(0, len(prompts), self.max_batch_size):
            end = start + self.max_batch_size
            rows = images[start:end] if images is not None and any(images) else None
            out.extend(self._generate_batch(prompts[start:end], params[start:end], rows))
        return out

    @torch.no_grad()
    def _generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        params: Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        self.calls += 1
        n = len(prompts)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: a prompt needs at least one token")
        was_training = self.model.training
        self.model.eval()
        if self._weights_version() != self._kv_weights:  # weights changed in place: stale KV
            self._kv_store.clear()
        # Each row's own random stream (backends/streams.py): its tokens do not depend on the
        # other rows of the call. Unseeded rows get fresh keys (never the global torch RNG).
        fresh = secrets.randbits(63)
        streams = [
            stream_key(fresh, i) if key is None else key
            for i, key in enumerate(row_keys([p.seed for p in params]))
        ]

        # Identical prompts (the G samples of a group) are prefilled once, then copied.
        unique: dict[tuple, int] = {}
        if images is None:
            row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
            cache, attn, positions, logits = self._prefill(list(unique))
        else:  # identical means same tokens and same pictures
            keys = [
                (tuple(p), tuple(r.sha256 for r in refs))
                for p, refs in zip(prompts, images, strict=True)
            ]
            row_of = [unique.setdefault(key, len(unique)) for key in keys]
            first = {row: i for i, row in reversed(list(enumerate(row_of)))}
            rows = [images[first[u]] for u in range(len(unique))]
            cache, attn, positions, logits = self._prefill([k[0] for k in unique], rows)
        # The stored KV this call continues has been read and dropped (`_prefill`); the
        # entries of episodes that sat this call out are kept while they and this call's rows
        # number at most the widest call's (`KVStore.fit`).
        self._kv_store.fit(n)
        expand = torch.tensor(row_of, device=attn.device)
        cache.batch_select_indices(expand)
        attn, logits = attn[expand], logits[expand]
        next_pos = positions[expand]
        decoder = self._static_decoder() if images is None else None
        if decoder is not None:  # the rest of the call decodes in a preallocated cache
            cache = StaticKV.adopt(cache, max(p.max_new_tokens for p in params))

        temps = [p.temperature for p in params]
        top_ps = [p.top_p for p in params]
        budgets = [p.max_new_tokens for p in params]
        stops = [list(p.stop) for p in params]
        tail_chars = [max((len(s) for s in st), default=0) for st in stops]

        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        want = [p.entropy_tokens for p in params]  # entropies asked for (first k tokens)
        entropies: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str] = ["length"] * n
        alive = list(range(n))  # row r of the live batch is sequence alive[r]
        while alive:
            logits = mask_logits(logits, self._banned)
            u = torch.tensor(
                uniforms([streams[s] for s in alive], [len(tokens[s]) for s in alive]),
                dtype=torch.float64,
            )
            choice, chosen_lp = sample_step(
                logits, [temps[s] for s in alive], [top_ps[s] for s in alive], u
            )
            chosen_ids, chosen_lps = choice.tolist(), chosen_lp.tolist()  # one device sync
            if any(len(tokens[s]) < want[s] for s in alive):  # only while some row asks
                step_entropy = sampling_entropy(
                    logits, [temps[s] for s in alive], [top_ps[s] for s in alive]
                ).tolist()
                for r, seq in enumerate(alive):
                    if len(tokens[seq]) < want[seq]:
                        entropies[seq].append(step_entropy[r])
            keep: list[int] = []
            for r, seq in enumerate(alive):
                tok = chosen_ids[r]
                tokens[seq].append(tok)
                logps[seq].append(chosen_lps[r])
                if tok in self.eos_token_ids:
                    reasons[seq] = "eos"
                elif self._hit_stop(tokens[seq], stops[seq], tail_chars[seq]):
                    reasons[seq] = "stop"
                elif len(tokens[seq]) >= budgets[seq]:
                    reasons[seq] = "length"
                else:
                    keep.append(r)
                    continue
                if self.prefix_cache:
                    # The next turn of this episode, or a branch of it (a tree rollout), starts
                    # with these tokens: keep their KV (after an end of sequence too: a tree's
                    # later round branches from its turn boundaries).
                    fed = tuple(prompts[seq]) + tuple(tokens[seq][:-1])
                    # ... and the pictures their KV has seen
                    seen = tuple(r.sha256 for r in images[seq]) if images is not None else None
                    self._kv_store.put(fed, row_kv(cache, attn, r), seen)
            if not keep:
                break
            if len(keep) < len(alive):  # finished sequences leave the batch
                idx = torch.tensor(keep, device=attn.device)
                cache.batch_select_indices(idx)
                attn, next_pos, choice = attn[idx], next_pos[idx], choice[keep]
                alive = [alive[r] for r in keep]
            attn = torch.cat([attn, torch.ones_like(attn[:, :1])], dim=1)
            ids = choice.view(-1, 1).to(attn.device)
            logits, cache = self._decode_step(ids, attn, next_pos, cache, decoder)
            next_pos = next_pos + 1
        self._kv_weights = self._weights_version()
        if was_training:
            self.model.train()
        return [
            Completion(
                token_ids=tokens[i],
                logprobs=logps[i],
                finish_reason=reasons[i],  # type: ignore[arg-type]
                text=self.tokenizer.decode(tokens[i], skip_special_tokens=False),
                entropies=entropies[i] if want[i] > 0 else None,
            )
            for i in range(n)
        ]

    def _weights_version(self) -> int:
        """Sum of the parameters' in-place version counters: any optimiser step or weight load
        changes it, so KV computed under older weights is never reused."""
        return sum(p._version for p in self.model.parameters())

    def _prefill(
        self,
        prompts: list[tuple[int, ...]],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run the prompts through the model, reusing the stored KV of the longest prefix each
        shares with an earlier call's row (backends/kv_store.py: an earlier turn of its
        episode, or a tree branch's parent).

        Row layout (columns of the attention mask): [pad][cached prefix][pad][new suffix]; pads
        are masked out and position ids are explicit, so rows of any cached / new length batch
        together. `images`: each prompt's images; those not in a reused prefix go into this
        prefill. An M-RoPE model (Qwen2-VL) gets the suffix's slice of its whole prompt's 3-D
        positions, and decodes on from the prompt's largest position + 1, as transformers'
        `get_rope_index` / `rope_deltas` do. Returns (cache, attention mask, next position
        [U, 1], last logits [U, V])."""
        from transformers import DynamicCache

        device = next(self.model.parameters()).device
        pictures = [tuple(r.sha256 for r in refs) for refs in images or [()] * len(prompts)]
        # The KV each prompt shares with a stored entry; the entries these rows continue are
        # dropped (their own KV replaces them at the call's end).
        hits = (
            self._kv_store.take(prompts, pictures) if self.prefix_cache else [Hit()] * len(prompts)
        )
        cached = [hit.length for hit in hits]
        suffixes = [p[length:] for p, length in zip(prompts, cached, strict=True)]
        self.prompt_tokens += sum(len(s) for s in suffixes)
        self.reused_tokens += sum(cached)
        u, past, width = len(prompts), max(cached), max(len(s) for s in suffixes)
        cache = DynamicCache()
        if past:
            load_past(cache, hits, past, device)
        ids = torch.full((u, width), self.pad_token_id, dtype=torch.long, device=device)
        attn = torch.zeros((u, past + width), dtype=torch.long, device=device)
        positions = torch.zeros((u, width), dtype=torch.long, device=device)
        following = torch.tensor([[len(p)] for p in prompts], dtype=torch.long, device=device)
        for i, (suffix, length) in enumerate(zip(suffixes, cached, strict=True)):
            ids[i, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            attn[i, past - length : past] = 1
            attn[i, past + width - len(suffix) :] = 1
            positions[i, width - len(suffix) :] = torch.arange(length, length + len(suffix))
        extra: dict[str, torch.Tensor] = {}
        if images and isinstance(self._vision, Qwen2VLSpec):  # M-RoPE: 3-D positions
            positions = positions[None].repeat(3, 1, 1)
            for i, (prompt, refs, length) in enumerate(zip(prompts, images, cached, strict=True)):
                whole = self._vision.positions(prompt, refs).to(device)
                positions[:, i, width - (len(prompt) - length) :] = whole[:, length:]
                following[i, 0] = whole.max() + 1
        if images:  # the pictures whose placeholders are in the new suffixes
            new = [refs[hit.pictures :] for refs, hit in zip(images, hits, strict=True)]
            extra = vision_inputs(self._compute_model(), new, device, ids, with_positions=False)
        out = self._forward(ids, attn, positions, cache, extra)
        return cache, attn, following, out.logits[:, -1, :].float()

    def _static_decoder(self) -> CompiledDecoder | None:
        """The compiled decoding step for the current compute model, chosen once per compute
        model (backends/fast_paths.py `choose_compiled_decode`), or None: the model's forward."""
        if self.compiled_decode_mode == "never":
            return None
        model = self._compute_model()
        if self._decoder_model is not model:
            rows = max(1, min(self.max_batch_size, 16))
            # A bf16 compute copy is checked against the float32 policy it was cast from.
            exact = self._exact_step if model is not self.model else None
            self._decoder, self.compiled_decode = choose_compiled_decode(
                model, self.compiled_decode_mode, rows, self._reference_step, exact=exact
            )
            self._decoder_model = model
        if self._decoder is not None and self._decoder.broken:
            return None
        return self._decoder

    def _reference_step(
        self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """A decoding step on the model's forward: float32 logits [B, V] of the last position."""
        return self._forward(ids, attn, positions, cache).logits[:, -1, :].float()

    def _exact_step(
        self, ids: torch.Tensor, attn: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> torch.Tensor:
        """`_reference_step` on the float32 policy itself rather than its bf16 compute copy."""
        return self._forward(ids, attn, positions, cache, model=self.model).logits[:, -1].float()

    def _decode_step(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        decoder: CompiledDecoder | None,
    ) -> tuple[torch.Tensor, Any]:
        """One decoding step -> (float32 logits [B, V], the cache to go on with): compiled over
        a `StaticKV`, else (or when that step fails: the decoder warned once) the model's
        forward over a DynamicCache."""
        if isinstance(cache, StaticKV):
            assert decoder is not None
            try:
                return decoder.step(ids, attn, positions, cache), cache
            except Exception:  # marked broken: this and later calls take the model's forward
                cache = cache.to_dynamic()
        return self._reference_step(ids, attn, positions, cache), cache

    def _forward(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        positions: torch.Tensor,
        cache: Any,
        extra: dict[str, torch.Tensor] | None = None,
        model: nn.Module | None = None,
    ) -> Any:
        """The forward of `model` (default: the compute model) over `cache`."""
        kwargs: dict[str, Any] = {self._cache_kw: cache, **(extra or {})}
        if self._keep_kw:  # only the last position's logits: the prefill never builds [N, T, V]
            kwargs[self._keep_kw] = 1
        return (model or self._compute_model())(
            input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=True, **kwargs
        )

    def _compute_model(self) -> nn.Module:
        """The module forward passes run on: the model itself, or for mixed_precision "bf16" a
        copy whose parameters are bfloat16 (buffers such as rotary frequencies stay float32),
        re-cast only when the weights have changed. Casting once per weight version, not once
        per forward: an autocast context per forward re-casts every weight at every decoding
        step, which cost more than the bfloat16 matmuls saved (bench/bf16_accuracy.py: 86 ms a
        step vs 46 ms; float32 78 ms). With `packed_weights` the copy's linear layers also keep
        a oneDNN-packed weight (packed_linear.py), re-packed with each new weight version."""
        if self.mixed_precision != "bf16":
            return self.model
        version = self._weights_version()
        if self._bf16_model is None:
            self._bf16_model = copy.deepcopy(self.model).eval()
            self._has_adapters = bool(adapter_names(self.model))
            for param in self._bf16_model.parameters():
                param.requires_grad_(False)
                param.data = param.data.to(torch.bfloat16)
            if self.packed_weights:
                self._packed = pack_linears(self._bf16_model, self.max_batch_size)
            rows = max(1, min(self.max_batch_size, 16))
            self.fast_paths = measure_fast_paths(
                self._bf16_model, self._packed, rows, self._time_step, self.choose_fast_paths
            )
            if not self.fast_paths["packed_weights"]:
                self._packed = []  # the layers run plain: nothing to re-pack with new weights
        elif version != self._bf16_version:
            pairs = zip(self._bf16_model.parameters(), self.model.parameters(), strict=True)
            for low, full in pairs:
                low.data.copy_(full.data)
            for layer in self._packed:
                layer.repack()
        self._bf16_version = version
        if self._has_adapters:
            # role adapters (model.role_policies=adapters): `as_role` switches the model's
            # active adapter; the copy holds every adapter and computes with the same one
            active = active_adapters(self.model)
            if active != active_adapters(self._bf16_model):
                set_active_adapters(self._bf16_model, active)
        return self._bf16_model

    def _time_step(
        self, model: nn.Module, rows: int, clock: Callable[[], float] = time.perf_counter
    ) -> float:
        """One decoding forward of `rows` rows, timed, called as `_forward` calls the model."""
        return time_decoding_step(
            model, rows, self._cache_kw, self._keep_kw, self.pad_token_id, clock
        )

    def _hit_stop(self, tokens: list[int], stops: list[str], tail_chars: int) -> bool:
        """Did the newest token complete a stop string? Decodes only a short tail: each token is
        at least one character, so the last `tail_chars + 1` tokens contain any stop string."""
        if not stops:
            return False
        tail = self.tokenizer.decode(tokens[-(tail_chars + 1) :], skip_special_tokens=False)
        return any(s in tail for s in stops)

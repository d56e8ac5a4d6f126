"""The GPU generator: a vLLM engine behind the same `Generator` protocol as backends/hf.py.

Selected by `rollout.backend=vllm` (extra `agentic-rl[vllm]`, a CUDA GPU); this module is
imported only then. What it guarantees, as the HF generator does:

- token ids in, token ids and behaviour logprobs out: prompts go in as `TokensPrompt`s, the
  sampled ids come back untouched, each with its behaviour logprob: under the distribution it
  was drawn from, after temperature and top-p (the engine's `logprobs_mode="processed_logprobs"`;
  the default `raw_logprobs` would be at temperature 1), which the learner compares with its
  own logprobs at the sampling temperature (backends/hf.py says what top-p < 1 means);
- stop at action tags: the chat format's stop strings end a turn, the tag stays in the output;
- per-request sampling settings (one vLLM `SamplingParams` per prompt) and a seed per request
  from its row key (backends/streams.py `row_keys`, as the HF generator's streams): the G
  samples of a group differ, a run stays reproducible, and a request's samples do not depend on
  which other requests share the call (rollout.env_workers > 0 regroups episodes);
- prefix caching on: turn k + 1 of an episode starts with turn k's context, whose KV blocks
  are reused instead of recomputed;
- weight sync after each update: the full state dict is loaded into the engine's model in
  place (`LLM.apply_model` -> `model.load_weights`), or for LoRA runs only the adapter, saved
  as a PEFT directory and served under a new `LoRARequest` id; the prefix cache is reset
  because its KV was computed with the old weights;
- sleep / wake (`vllm.sleep_level`): the engine frees its GPU memory while the learner updates;
- images (a vision-language policy, model/vision.py): `generate(..., images=)` takes each
  prompt's `ImageRef`s in the order of its placeholders, as the HF generator does. The pictures
  are read back with their hash check (`shown_image`: a changed file fails loudly; each picture
  is decoded once per process, not once per turn of its episode) and go into the
  request as `multi_modal_data={"image": [PIL images]}`; the engine is started with
  `limit_mm_per_prompt={"image": vllm.max_images_per_prompt}`. The placeholder tokens a VLM
  never samples are banned (`bad_words`), as the HF generator masks their logits (the learner
  masks them too: model/vocab_logprobs.py `mask_logits`).

Image placeholders in token prompts. The prompt ids hold the chat format's expanded placeholder
of each picture (`Idefics3Spec.placeholder`: `<fake_token_around_image><global-img>`, `<image>` x
tokens_per_image, `<fake_token_around_image>`). vLLM does not take those as they are: for a
`TokensPrompt` with `multi_modal_data` its multimodal processor always applies the model's prompt
update itself (`BaseMultiModalProcessor._apply_hf_processor_main` reports token prompts as not
updated, so `_apply_prompt_updates` runs), and for Idefics3 that update replaces each input
`<image>` token with the full expansion (vllm/model_executor/models/idefics3.py,
`PromptReplacement(target=image_token)`); an already expanded prompt would be expanded again, out
of step with the learner's tokens. So each picture's expanded placeholder is collapsed to the one
`<image>` input token in the request (`collapse_placeholders`), vLLM expands it back, and the
prompt ids the engine reports (`RequestOutput.prompt_token_ids`) must equal the rollout's ids:
an engine whose processor expands a picture differently (another `image_seq_len`, image
splitting) fails loudly instead of sampling in a context the learner never sees. This reading of
vLLM comes from its source; it has been checked only against the stand-in engine of
tests/backends/test_vllm_generator.py, not a real engine (no GPU here). Image inputs are built
for the Idefics3 family only: a Qwen2-VL policy's pictures (sized placeholders, M-RoPE) run on
the HF backend, and this generator refuses them at construction.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so handing it the
learner's tensors copies them once, straight into its parameters.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.requests import params_per_prompt
from agentic_rl.backends.streams import row_keys
from agentic_rl.config.schema import Config
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.images import shown_image
from agentic_rl.model.load import TINY_NAME, model_dir
from agentic_rl.model.lora import merged_copy, save_adapter
from agentic_rl.model.vision import Idefics3Spec, spec_of_dir
from agentic_rl.types import Completion, ImageRef, SamplingParams

# The values vLLM accepts for `max_lora_rank`; the engine is sized to the smallest that fits.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
_SEED_MOD = 2**31 - 1


def import_vllm() -> Any:
    """The vllm module, or a ModelLoadError naming the extra to install."""
    try:
        import vllm
    except ImportError as err:
        raise ModelLoadError(
            f"rollout.backend=vllm needs vLLM, which is not installed ({err}): "
            "pip install 'agentic-rl[vllm]' on a machine with a CUDA GPU, "
            "or use rollout.backend=hf"
        ) from err
    return vllm


def sampling_kwargs(
    params: SamplingParams, stream: int | None, banned: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments of `vllm.SamplingParams` for one request; `stream`: the request's row
    key (backends/streams.py `row_keys`: its seed, told apart from earlier requests of the call
    with the same seed; None: unseeded), which becomes vLLM's per-request seed, so a request's
    samples depend on its own key, not on the other requests of the call (the HF generator's
    per-row streams); `banned`: tokens (text) never to sample, a VLM's image placeholders."""
    greedy = params.temperature <= 0
    extra: dict[str, Any] = {"bad_words": list(banned)} if banned else {}
    return {
        "n": 1,
        "max_tokens": params.max_new_tokens,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "stop": list(params.stop),
        "include_stop_str_in_output": True,  # the action end tag belongs to the turn
        "logprobs": 0,  # the sampled token's logprob only, no top-k alternatives
        "skip_special_tokens": False,  # stop strings are matched on the raw text, as in HF
        "seed": None if greedy or stream is None else stream % _SEED_MOD,
        **extra,
    }


def sampled_logprobs(output: Any) -> list[float]:
    """The logprob of each sampled token of one vLLM `CompletionOutput`.

    `output.logprobs[i]` maps token id -> Logprob for position i; the sampled id is always
    among them (logprobs=0 asks for it alone)."""
    ids = list(output.token_ids)
    if output.logprobs is None or len(output.logprobs) != len(ids):
        raise RuntimeError(
            "vLLM returned no per-token logprobs; the request must set logprobs=0 "
            f"(got {None if output.logprobs is None else len(output.logprobs)} for {len(ids)})"
        )
    return [
        float(position[token].logprob) for position, token in zip(output.logprobs, ids, strict=True)
    ]


def finish_reason(output: Any) -> str:
    """vLLM's (finish_reason, stop_reason) as the protocol's "stop" / "eos" / "length".

    vLLM says "stop" both for a stop string (stop_reason = the string) and for an end-of-
    sequence or stop token (stop_reason None or the token id)."""
    if output.finish_reason == "length":
        return "length"
    if output.finish_reason == "stop":
        return "stop" if isinstance(output.stop_reason, str) else "eos"
    raise RuntimeError(f"vLLM request ended with finish_reason={output.finish_reason!r}")


def to_completion(output: Any, tokenizer: Any) -> Completion:
    """One vLLM `CompletionOutput` -> Completion (ids exactly as sampled)."""
    ids = [int(t) for t in output.token_ids]
    return Completion(
        token_ids=ids,
        logprobs=sampled_logprobs(output),
        finish_reason=finish_reason(output),  # type: ignore[arg-type]
        # Decoded from the ids, as the HF generator does, for the action parser only.
        text=tokenizer.decode(ids, skip_special_tokens=False),
    )


def lora_rank_bucket(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of rank `rank`."""
    for bucket in VLLM_LORA_RANKS:
        if bucket >= rank:
            return bucket
    raise ModelLoadError(f"model.lora_rank={rank} exceeds vLLM's largest LoRA rank")


def placeholder_ids(spec: Idefics3Spec, tokenizer: Any) -> list[int]:
    """The token ids of one picture's expanded placeholder, as the chat format tokenises it."""
    return [int(t) for t in tokenizer(spec.placeholder, add_special_tokens=False)["input_ids"]]


def collapse_placeholders(
    ids: Sequence[int], placeholder: Sequence[int], image_token_id: int
) -> tuple[list[int], int]:
    """`ids` with each expanded `placeholder` replaced by the one `<image>` token vLLM expands
    (see the module docstring), and the number of placeholders found. An `<image>` token outside
    a whole placeholder is refused: vLLM would take it for a picture of its own."""
    out: list[int] = []
    found = 0
    i, n, width = 0, len(ids), len(placeholder)
    while i < n:
        if ids[i] == placeholder[0] and list(ids[i : i + width]) == list(placeholder):
            out.append(image_token_id)
            found += 1
            i += width
            continue
        if ids[i] == image_token_id:
            raise ValueError(
                f"image token at position {i} outside a whole image placeholder: the prompt's "
                "placeholders are not the chat format's"
            )
        out.append(int(ids[i]))
        i += 1
    return out, found


def engine_kwargs(cfg: Config, model_path: str) -> dict[str, Any]:
    """Arguments of `vllm.LLM` for this run; a vision-language model (`model_path` has a vision
    config) gets `limit_mm_per_prompt` from vllm.max_images_per_prompt."""
    kwargs: dict[str, Any] = {
        "model": model_path,
        "tokenizer": model_path,
        "dtype": cfg.vllm.dtype,
        "seed": cfg.trainer.seed,
        "gpu_memory_utilization": cfg.vllm.gpu_memory_utilization,
        "enable_prefix_caching": True,
        "enforce_eager": cfg.vllm.enforce_eager,
        # Behaviour logprobs of the distribution sampled from (temperature, top-p applied).
        "logprobs_mode": "processed_logprobs",
    }
    if cfg.vllm.max_model_len:
        kwargs["max_model_len"] = cfg.vllm.max_model_len
    if cfg.vllm.sleep_level:
        kwargs["enable_sleep_mode"] = True
    if cfg.model.lora_rank:
        kwargs.update(
            enable_lora=True, max_loras=1, max_lora_rank=lora_rank_bucket(cfg.model.lora_rank)
        )
    if spec_of_dir(model_path) is not None:
        limit = cfg.vllm.max_images_per_prompt
        if limit <= 0:  # config validation refuses it where it can tell the model takes images
            raise ModelLoadError(
                f"{model_path} is a vision-language model: set vllm.max_images_per_prompt > 0 "
                "(the most pictures one prompt holds)"
            )
        kwargs["limit_mm_per_prompt"] = {"image": limit}
    return kwargs


def engine_model_dir(cfg: Config, policy: nn.Module, tokenizer: Any, scratch: Path) -> Path:
    """The directory vLLM loads its starting weights and tokenizer from.

    A local or the bundled model is read where it is; the random "tiny" test model exists only
    in memory, so its (base) weights are written to `scratch` first."""
    if cfg.model.name != TINY_NAME:
        return model_dir(cfg.model)
    target = scratch / "base_model"
    merged_copy(policy).save_pretrained(str(target), safe_serialization=True)
    tokenizer.save_pretrained(str(target))
    return target


def _load_weights(weights: list[tuple[str, torch.Tensor]], model: nn.Module) -> None:
    """Runs inside the engine's worker: vLLM models map Hugging Face names onto their fused
    layers (qkv_proj, gate_up_proj) in `load_weights`."""
    model.load_weights(weights=weights)


class VLLMGenerator:
    """`Generator` over a vLLM `LLM` engine (see the module docstring).

    `llm`, `sampling_params_cls` and `lora_request_cls` are vLLM's objects in real use
    (`from_config` builds them); tests pass stand-ins with the same call signatures."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        sampling_params_cls: Any,
        lora_request_cls: Any = None,
        sleep_level: int = 0,
        scratch_dir: Path | None = None,
        max_images_per_prompt: int | None = None,
    ) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        # A vision-language model's placeholders, read from the tokenizer's model directory as
        # the chat format reads them (model/vision.py `image_placeholder`); None: text-only.
        spec = spec_of_dir(str(getattr(tokenizer, "name_or_path", "") or ""))
        if spec is not None and not isinstance(spec, Idefics3Spec):
            raise ModelLoadError(
                f"the vllm backend takes the pictures of Idefics3-family models only, not "
                f"{type(spec).__name__}'s (placeholders sized by the picture, M-RoPE): use "
                "rollout.backend=hf for this policy"
            )
        self.vision = spec
        self._placeholder: list[int] = []
        self._banned: list[str] = []
        if self.vision is not None:
            self._placeholder = placeholder_ids(self.vision, tokenizer)
            self._banned = list(self.vision.special_tokens)
        # The engine's limit_mm_per_prompt (None: not checked here, the stand-in engine's case).
        self.max_images_per_prompt = max_images_per_prompt
        self._sampling_cls = sampling_params_cls
        self._lora_cls = lora_request_cls
        self.sleep_level = sleep_level
        if scratch_dir is None:
            scratch_dir = Path(tempfile.mkdtemp(prefix="agentic-rl-vllm-"))
            weakref.finalize(self, shutil.rmtree, str(scratch_dir), True)
        self.scratch_dir = Path(scratch_dir)
        self._asleep: set[str] = set()  # memory kinds released by sleep(): weights, kv_cache
        self._lora: Any = None  # the LoRARequest of the current adapter (None = base model)
        self._lora_dir: Path | None = None
        self._lora_used = False  # has the engine loaded the current adapter (a generate ran)?
        self.adapter_version = 0
        self.weight_updates = 0
        self.calls = 0  # generate() calls
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self.reused_tokens = 0  # prompt tokens served from the prefix cache

    @classmethod
    def from_config(cls, cfg: Config, policy: nn.Module, tokenizer: Any) -> VLLMGenerator:
        """Start an engine on the policy's model (`model.name`) with the `vllm` settings."""
        # Must be set before the engine starts: keep it in this process (see module docstring).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = import_vllm()
        from vllm.lora.request import LoRARequest

        scratch = Path(tempfile.mkdtemp(prefix="agentic-rl-vllm-"))
        path = engine_model_dir(cfg, policy, tokenizer, scratch)
        llm = vllm.LLM(**engine_kwargs(cfg, str(path)))
        generator = cls(
            llm,
            tokenizer,
            vllm.SamplingParams,
            LoRARequest if cfg.model.lora_rank else None,
            cfg.vllm.sleep_level,
            scratch,
            cfg.vllm.max_images_per_prompt,
        )
        weakref.finalize(generator, shutil.rmtree, str(scratch), True)
        return generator

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        params = params_per_prompt(prompts, params, images)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt: a prompt needs at least one token")
        if not prompts:
            return []
        ids = [[int(t) for t in p] for p in prompts]
        rows = images if images is not None else [()] * len(prompts)
        # TokensPrompts, all checked (pictures read) before the engine is woken or asked
        requests = [self._request(i, p, rows[i]) for i, p in enumerate(ids)]
        self.wake_up()
        self._lora_used = self._lora_used or self._lora is not None
        streams = row_keys([p.seed for p in params])
        sampling = [
            self._sampling_cls(**sampling_kwargs(p, stream, self._banned))
            for p, stream in zip(params, streams, strict=True)
        ]
        outputs = self.llm.generate(
            requests, sampling, use_tqdm=False, lora_request=self._lora
        )  # in request order
        self.calls += 1
        completions = []
        for i, (request, output) in enumerate(zip(requests, outputs, strict=True)):
            if "multi_modal_data" in request:
                self._check_expanded(i, ids[i], output)
            completion = to_completion(output.outputs[0], self.tokenizer)
            completions.append(completion)
            self.prompt_tokens += len(ids[i])
            self.generated_tokens += len(completion.token_ids)
            self.reused_tokens += int(getattr(output, "num_cached_tokens", 0) or 0)
        return completions

    def _request(self, index: int, ids: list[int], refs: Sequence[ImageRef]) -> dict[str, Any]:
        """The TokensPrompt of prompt `index`: plain token ids, or for a prompt with pictures
        the collapsed ids and its pictures (read back with their hash check) in placeholder
        order. A VLM prompt's placeholders must number its pictures."""
        if self.vision is None:
            if refs:
                raise ValueError(
                    f"prompt {index} carries {len(refs)} image(s) but the model is not a "
                    "vision-language model"
                )
            return {"prompt_token_ids": ids}
        collapsed, found = collapse_placeholders(ids, self._placeholder, self.vision.image_token_id)
        if found != len(refs):
            raise ValueError(
                f"prompt {index}: {found} image placeholders for {len(refs)} images: each "
                "picture's placeholder must be in the prompt, in the order of its images"
            )
        if not refs:
            return {"prompt_token_ids": ids}
        limit = self.max_images_per_prompt
        if limit is not None and len(refs) > limit:
            raise ValueError(
                f"prompt {index} carries {len(refs)} images but the engine takes at most "
                f"{limit} per prompt: raise vllm.max_images_per_prompt"
            )
        pictures = [shown_image(ref) for ref in refs]  # ImageError if a file changed
        return {"prompt_token_ids": collapsed, "multi_modal_data": {"image": pictures}}

    @staticmethod
    def _check_expanded(index: int, ids: list[int], output: Any) -> None:
        """The engine expanded prompt `index`'s placeholders back to the rollout's ids (see the
        module docstring); an output without `prompt_token_ids` (a stand-in) is not checked."""
        engine_ids = getattr(output, "prompt_token_ids", None)
        if engine_ids is not None and [int(t) for t in engine_ids] != ids:
            raise RuntimeError(
                f"prompt {index}: vLLM expanded its image placeholders into {len(engine_ids)} "
                f"prompt tokens, not the chat format's {len(ids)} (or into other ids): the "
                "model directory's processor (image_seq_len, image splitting) does not match "
                "its VisionSpec, so the engine would sample in a context the learner never sees"
            )

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Load a full state dict (Hugging Face names) into the engine's model in place."""
        if state is None:
            raise ValueError("the vLLM generator holds its own weights: pass the state dict")
        weights = [(name, tensor.detach()) for name, tensor in state.items()]
        self._wake(["weights"])  # after a level-2 sleep the weight memory must exist again
        self.llm.apply_model(functools.partial(_load_weights, weights))
        self.wake_up()
        self.llm.reset_prefix_cache()  # cached KV was computed with the old weights
        self.weight_updates += 1

    def update_adapter(self, policy: nn.Module) -> None:
        """Serve the policy's current LoRA adapter: written as a PEFT directory and requested
        under a new id (vLLM caches adapters by id); the previous one is dropped."""
        if self._lora_cls is None:
            raise RuntimeError("this engine was started without LoRA (model.lora_rank=0)")
        self.adapter_version += 1
        version = self.adapter_version
        path = self.scratch_dir / f"adapter_{version:06d}"
        save_adapter(policy, path)
        self.wake_up()
        old_loaded, old_dir = self._lora_used, self._lora_dir
        self._lora = self._lora_cls(f"policy-v{version}", version, str(path))
        self._lora_dir, self._lora_used = path, False
        remove = getattr(getattr(self.llm, "llm_engine", None), "remove_lora", None)
        if old_loaded and callable(remove):  # free the engine's slot of the previous adapter
            remove(version - 1)
        if old_dir is not None:
            shutil.rmtree(old_dir, ignore_errors=True)
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Release GPU memory until the next sync or generate (vllm.sleep_level > 0)."""
        if self.sleep_level and not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = {"weights", "kv_cache"}

    def wake_up(self) -> None:
        self._wake(["weights", "kv_cache"])

    def _wake(self, tags: list[str]) -> None:
        todo = [tag for tag in tags if tag in self._asleep]
        if todo:
            self.llm.wake_up(tags=todo)
            self._asleep -= set(todo)

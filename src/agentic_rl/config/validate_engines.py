"""Validation of the engines that generate and update: LoRA (`model.lora_*`), the generator
backend (`rollout.backend`, `rollout.mixed_precision`, the `vllm` section) and the learner
(`learner`: one process or FSDP2; `trainer.device`: where it runs, `resolve_device`). Called
by `validate.validate`."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from agentic_rl.config.checks import _check_choice, _unused
from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    import torch

    from agentic_rl.config.schema import Config

BACKENDS = ("hf", "vllm")
VLLM_DTYPES = ("auto", "bfloat16", "float16", "float32")
LEARNER_STRATEGIES = ("single", "fsdp2")
MIXED_PRECISION = ("no", "bf16")
COMPILED_DECODE = ("auto", "always", "never")


def validate_engines(cfg: Config) -> None:
    """Reject LoRA, generator-backend and learner settings that are invalid or would do nothing."""
    _validate_lora_and_backend(cfg)
    _validate_learner(cfg)


def _validate_lora_and_backend(cfg: Config) -> None:
    model, vllm = cfg.model, cfg.vllm
    _check_choice("rollout.backend", cfg.rollout.backend, BACKENDS)
    _check_choice("rollout.mixed_precision", cfg.rollout.mixed_precision, MIXED_PRECISION)
    _check_choice("rollout.compiled_decode", cfg.rollout.compiled_decode, COMPILED_DECODE)
    if model.lora_rank < 0:
        raise ConfigError(
            f"model.lora_rank must be >= 0 (0 = full fine-tuning), got {model.lora_rank}"
        )
    if model.lora_rank == 0:
        _unused(cfg, ["model.lora_alpha", "model.lora_targets"], "model.lora_rank=0 (no LoRA)")
    else:
        targets = model.lora_targets
        if (
            not isinstance(targets, list)
            or not targets
            or not all(isinstance(t, str) and t for t in targets)
        ):
            raise ConfigError(f"model.lora_targets must be a list of layer names, got {targets!r}")
        if model.lora_alpha <= 0:
            raise ConfigError(f"model.lora_alpha must be > 0, got {model.lora_alpha}")
    if cfg.rollout.backend == "vllm":
        _unused(cfg, ["rollout.mixed_precision"], "vLLM computes in vllm.dtype")
        _unused(cfg, ["rollout.compiled_decode"], "vLLM runs its own compiled engine")
    if cfg.rollout.backend != "vllm":
        keys = [
            "gpu_memory_utilization",
            "dtype",
            "max_model_len",
            "sleep_level",
            "enforce_eager",
            "max_images_per_prompt",
        ]
        _unused(cfg, [f"vllm.{k}" for k in keys], "rollout.backend is not vllm")
        return
    _check_choice("vllm.dtype", vllm.dtype, VLLM_DTYPES)
    if not 0 < vllm.gpu_memory_utilization <= 1:
        raise ConfigError(
            f"vllm.gpu_memory_utilization must be in (0, 1], got {vllm.gpu_memory_utilization}"
        )
    if vllm.sleep_level not in (0, 1, 2):
        raise ConfigError(f"vllm.sleep_level must be 0, 1 or 2, got {vllm.sleep_level}")
    if vllm.sleep_level == 2 and model.lora_rank > 0:
        raise ConfigError(
            "vllm.sleep_level=2 discards the engine's base weights, but LoRA runs only send the "
            "adapter after an update: use vllm.sleep_level=1"
        )
    if vllm.max_model_len < 0:
        raise ConfigError(f"vllm.max_model_len must be >= 0, got {vllm.max_model_len}")


def resolve_device(cfg: Config) -> torch.device:
    """The device `trainer.device` names on this machine (the one rule, read by validation and
    by `train.setup.build`): "auto" is the GPU when torch sees one, else the CPU; under
    learner.strategy=fsdp2 a GPU is this process's, cuda:LOCAL_RANK (torchrun sets it). Raises
    ConfigError for a malformed name, and for CUDA on a machine without it."""
    import torch

    name = cfg.trainer.device
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise ConfigError(f"trainer.device: {name!r} is not auto, cpu, cuda or cuda:N")
    fsdp = cfg.learner.strategy == "fsdp2"
    if fsdp and name.startswith("cuda:"):
        raise ConfigError(
            f"trainer.device={name}: under learner.strategy=fsdp2 each process runs on its own "
            "GPU, cuda:LOCAL_RANK; use trainer.device=cuda or auto"
        )
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.device={name} but torch sees no CUDA device (torch {torch.__version__}, "
            "torch.cuda.is_available() is False): use trainer.device=cpu or auto"
        )
    index = int(os.environ.get("LOCAL_RANK", "0")) if fsdp else int(name.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"trainer.device={name}: cuda:{index} does not exist ({count} GPUs)")
    return torch.device("cuda", index)


def _validate_learner(cfg: Config) -> None:
    learner = cfg.learner
    device = resolve_device(cfg)
    if cfg.rollout.backend == "vllm" and device.type == "cuda" and device.index:
        raise ConfigError(
            f"trainer.device={cfg.trainer.device} with rollout.backend=vllm: the engine runs on "
            "the first visible GPU, cuda:0, and shares it with the learner; choose the GPU with "
            "CUDA_VISIBLE_DEVICES and keep trainer.device=cuda"
        )
    if cfg.rollout.compiled_decode == "always" and device.type != "cpu":
        raise ConfigError(
            f"rollout.compiled_decode=always does nothing on trainer.device={cfg.trainer.device} "
            f"({device}): the compiled decoding step is for the CPU; use auto or never"
        )
    _check_choice("learner.strategy", learner.strategy, LEARNER_STRATEGIES)
    _check_choice("learner.mixed_precision", learner.mixed_precision, MIXED_PRECISION)
    precisions = (learner.mixed_precision, cfg.rollout.mixed_precision)
    if "bf16" in precisions and cfg.model.dtype != "float32":
        raise ConfigError(
            "mixed_precision=bf16 keeps float32 weights and computes in bfloat16: set "
            f"model.dtype=float32, not {cfg.model.dtype}"
        )
    if learner.strategy == "single":
        _unused(cfg, ["learner.defer_grad_sync"], "it applies to learner.strategy=fsdp2 only")
        return
    # Combinations whose engines would each need their own per-process wiring (not built yet).
    for key, off, why in (
        ("rollout.backend", "hf", "each process generates with its own copy of the weights"),
        ("model.lora_rank", 0, "the adapters would be sharded like full weights"),
        ("rollout.max_staleness", 0, "the rollout worker would race the sharded update"),
        ("ray.enabled", False, "every process would start its own Ray env workers"),
        (
            "optim.micro_batch_tokens",
            0,
            "the processes must run as many micro-batches each; use optim.micro_batch_size",
        ),
    ):
        section, name = key.split(".")
        value = getattr(getattr(cfg, section, None), name, off)
        if value != off:
            raise ConfigError(f"learner.strategy=fsdp2 does not support {key}={value} yet: {why}")
    if learner.mixed_precision == "bf16":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "learner.mixed_precision=bf16 needs a GPU (FSDP2 mixed precision); on CPU use "
                "learner.mixed_precision=no"
            )

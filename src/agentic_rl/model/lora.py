"""LoRA through PEFT (extra `agentic-rl[peft]`): low-rank adapters on the policy.

With `model.lora_rank > 0` the policy is a `peft.PeftModel` whose base weights are frozen and
whose adapters (Hu et al. 2021, W x + (alpha / r) B A x, B initialised to 0) are the only
trainable parameters. Consequences used across the package:

- the reference policy is the same object with the adapter switched off (`adapter_disabled`),
  never a second copy of the weights;
- checkpoints and weight syncs to a separate generator carry the adapter only
  (`adapter_state`, `save_adapter`): the frozen base is rebuilt from `model.name`.

peft is imported only when a LoRA model is built; `is_lora` never imports it.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.errors import ModelLoadError

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # the file names PEFT and vLLM read
ADAPTER_CONFIG = "adapter_config.json"


def require_peft() -> Any:
    """The peft module, or a ModelLoadError naming the extra to install."""
    try:
        import peft
    except ImportError as err:
        raise ModelLoadError(
            f"model.lora_rank > 0 needs PEFT, which is not installed ({err}): "
            "pip install 'agentic-rl[peft]' (or set model.lora_rank=0 for full fine-tuning)"
        ) from err
    return peft


def is_lora(model: Any) -> bool:
    """Is `model` a PEFT-wrapped policy? (No import: a PeftModel exists only if peft is loaded.)"""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def unwrap(model: nn.Module) -> nn.Module:
    """The transformers model that runs forward passes: for a PEFT policy its base model, which
    holds the injected adapter layers (so it computes with the adapter unless disabled)."""
    return model.get_base_model() if is_lora(model) else model


def apply_lora(model: nn.Module, cfg: ModelConfig) -> nn.Module:
    """Wrap `model` with fresh LoRA adapters on `cfg.lora_targets`; only they stay trainable.

    B starts at zero, so the wrapped model computes exactly what `model` did. Dropout is 0: the
    learner recomputes logprobs in train mode and a random mask would break ratio == 1."""
    peft = require_peft()
    config = peft.LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=list(cfg.lora_targets),
        lora_dropout=0.0,
        bias="none",
    )
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise ModelLoadError(f"model.lora_targets={list(cfg.lora_targets)}: {err}") from err
    return wrapped


@contextlib.contextmanager
def adapter_disabled(model: nn.Module) -> Iterator[None]:
    """Run `model` as its base model (the LoRA reference policy); a no-op for other models."""
    if not is_lora(model):
        yield
        return
    with model.disable_adapter():
        yield


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors only, under PEFT's file names (no adapter name inside keys)."""
    peft = require_peft()
    return {k: v.detach().contiguous() for k, v in peft.get_peft_model_state_dict(model).items()}


def load_adapter_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load tensors from `adapter_state` back into `model`; every adapter tensor must be there."""
    peft = require_peft()
    current = peft.get_peft_model_state_dict(model)
    missing, unexpected = sorted(set(current) - set(state)), sorted(set(state) - set(current))
    if missing or unexpected:
        raise ValueError(
            "adapter does not match the model (model.lora_rank / model.lora_targets changed?): "
            f"missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for key, value in state.items():
        if value.shape != current[key].shape:
            raise ValueError(
                f"adapter tensor {key}: shape {tuple(value.shape)} in the file but "
                f"{tuple(current[key].shape)} in the model (model.lora_rank changed?)"
            )
    peft.set_peft_model_state_dict(model, state)


def save_adapter(model: nn.Module, path: Path) -> list[Path]:
    """Write the adapter as a PEFT directory (`adapter_config.json` + `adapter_model.safetensors`),
    which PEFT's `PeftModel.from_pretrained` and vLLM's `LoRARequest` load. Returns the files."""
    path = Path(path)
    model.save_pretrained(str(path), safe_serialization=True)
    (path / "README.md").unlink(missing_ok=True)  # PEFT's model-card template; nothing in it
    files = [path / ADAPTER_CONFIG, path / ADAPTER_WEIGHTS]
    for file in files:
        if not file.is_file():
            raise RuntimeError(f"PEFT did not write {file}")
    return files


def merged_copy(model: nn.Module) -> nn.Module:
    """A plain transformers model with the adapter folded into the weights (W + (alpha/r) B A),
    for exports and for generators that cannot apply adapters. `model` itself is untouched."""
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Trainable and total parameter counts (tied tensors counted once)."""
    seen: dict[int, nn.Parameter] = {id(p): p for p in model.parameters()}
    return {
        "trainable": sum(p.numel() for p in seen.values() if p.requires_grad),
        "total": sum(p.numel() for p in seen.values()),
    }

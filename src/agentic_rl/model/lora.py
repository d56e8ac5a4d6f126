"""LoRA through PEFT (extra `agentic-rl[peft]`): low-rank adapters on the policy.

With `model.lora_rank > 0` the policy is a `peft.PeftModel` whose base weights are frozen and
whose adapters (Hu et al. 2021, W x + (alpha / r) B A x, B initialised to 0) are the only
trainable parameters. Consequences used across the package:

- the KL reference policy is the same object with the adapter switched off
  (`adapter_disabled`), no second copy of the weights, unless a warm start moved the adapter
  before RL: then it is the same object with a frozen copy of the adapters swapped in
  (`AdapterReference`), still no second copy of the base;
- checkpoints and weight syncs to a separate generator carry the adapter only
  (`adapter_state`, `save_adapter`): the frozen base is rebuilt from `model.name`;
- with `model.role_policies=adapters` (multi-agent envs) the one frozen base carries a named
  adapter per role instead of PEFT's "default" one (`add_role_adapters`); whoever computes for
  a role activates its adapter (`use_adapter`, through model/roles.py `as_role`), and
  checkpoints hold every role's adapter in PEFT's layout (`adapter_weight_files`).

peft is imported only when a LoRA model is built; `is_lora` never imports it.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.errors import ModelLoadError

ADAPTER_WEIGHTS = "adapter_model.safetensors"  # the file names PEFT and vLLM read
ADAPTER_CONFIG = "adapter_config.json"
DEFAULT_ADAPTER = "default"  # PEFT's name for the one adapter of a plain LoRA policy


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
    try:
        wrapped = peft.get_peft_model(model, _lora_config(peft, cfg))
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise ModelLoadError(f"model.lora_targets={list(cfg.lora_targets)}: {err}") from err
    return wrapped


def _lora_config(peft: Any, cfg: ModelConfig) -> Any:
    return peft.LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        target_modules=list(cfg.lora_targets),
        lora_dropout=0.0,
        bias="none",
    )


def add_role_adapters(
    model: nn.Module, roles: Sequence[str], cfg: ModelConfig, trained: Sequence[str] = ()
) -> None:
    """Give each role of a multi-agent env its own LoRA adapter on `model`'s frozen base
    (PEFT named adapters, one per role, in place of the "default" one `apply_lora` made).

    Each starts as a fresh adapter (B = 0: the base model). Only the adapters of `trained`
    (rollout.train_roles; empty = every role) require gradients, so a frozen role's adapter
    is in no optimizer and never moves. The first role's adapter is left active."""
    if not is_lora(model):
        raise ValueError("model.role_policies=adapters needs a LoRA policy (model.lora_rank > 0)")
    bad = [r for r in roles if not r.isidentifier() or r == DEFAULT_ADAPTER]
    if not roles or bad:
        raise ValueError(f"role adapters need role names that are identifiers, got {list(roles)}")
    config = _lora_config(require_peft(), cfg)
    for role in roles:
        model.add_adapter(role, config)
    model.set_adapter(roles[0])  # before the delete: PEFT warns when the active one goes
    model.delete_adapter(DEFAULT_ADAPTER)
    for role in roles:
        for param in adapter_parameters(model, role):
            param.requires_grad_(not trained or role in trained)


def _first_lora_layer(model: nn.Module) -> Any | None:
    """The first LoRA layer of `model` (a PEFT policy or its unwrapped base), None for a model
    without adapters (or when peft was never imported: then none can exist)."""
    if sys.modules.get("peft") is None:
        return None
    from peft.tuners.lora import LoraLayer

    return next((m for m in model.modules() if isinstance(m, LoraLayer)), None)


def adapter_names(model: nn.Module) -> tuple[str, ...]:
    """The named adapters `model` (a PEFT policy or its unwrapped base) carries, in the order
    they were added; () for a model without adapters."""
    layer = _first_lora_layer(model)
    return () if layer is None else tuple(layer.lora_A.keys())


def role_adapters(model: nn.Module) -> tuple[str, ...]:
    """The roles that have their own adapter (`add_role_adapters`); () for any other model."""
    names = adapter_names(model)
    return () if names in ((), (DEFAULT_ADAPTER,)) else names


def adapter_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """The LoRA tensors of adapter `name` (its A and B matrices in every adapted layer)."""
    marks = (f".lora_A.{name}.", f".lora_B.{name}.")
    return [p for n, p in model.named_parameters() if any(m in n for m in marks)]


def active_adapters(model: nn.Module) -> tuple[str, ...]:
    """The adapters `model` (a PEFT policy or its unwrapped base) computes with now; () for a
    model without adapters."""
    layer = _first_lora_layer(model)
    return () if layer is None else tuple(layer.active_adapters)


def set_active_adapters(model: nn.Module, names: Sequence[str]) -> None:
    """Make `names` the adapters `model` (a PEFT policy or its unwrapped base) computes with,
    leaving every parameter's `requires_grad` as it was: PEFT's `set_adapter` also makes the
    active adapter trainable, and which adapters train is `add_role_adapters`' decision (or,
    on the generator's frozen bfloat16 copy, none)."""
    from peft.tuners.lora import LoraLayer
    from peft.tuners.tuners_utils import set_adapter

    flags = [
        (p, p.requires_grad)
        for layer in model.modules()
        if isinstance(layer, LoraLayer)
        for p in layer.parameters()
    ]
    if is_lora(model):
        model.base_model.set_adapter(list(names))  # keeps PEFT's own record in step too
    else:
        set_adapter(model, list(names))
    for param, flag in flags:
        param.requires_grad_(flag)


@contextlib.contextmanager
def use_adapter(model: nn.Module, name: str | None) -> Iterator[None]:
    """Compute with adapter `name` active (a role's own policy), then restore the one before.

    Works on the PEFT policy and on its unwrapped base (the HF generator's model); which
    adapters train is left as it was (`set_active_adapters`). `None`: nothing changes (a model
    without role adapters, a sample without a role)."""
    if name is None:
        yield
        return
    if name not in adapter_names(model):
        raise ValueError(f"no adapter {name!r} on the policy (it has {adapter_names(model)})")
    before = active_adapters(model)
    set_active_adapters(model, [name])
    try:
        yield
    finally:
        set_active_adapters(model, before)


@contextlib.contextmanager
def adapter_disabled(model: nn.Module) -> Iterator[None]:
    """Run `model` as its base model (the LoRA reference policy); a no-op for other models."""
    if not is_lora(model):
        yield
        return
    with model.disable_adapter():
        yield


class AdapterReference(nn.Module):
    """The KL reference of a LoRA run whose adapters moved before RL (a warm start, failure
    DPO): the policy's own frozen base with a frozen copy of every adapter tensor (every role's,
    with role adapters), swapped into the policy while the reference computes (`computing_with`).

    A frozen copy of the whole adapted model would cost the base's size again (the bundled
    model: 513 MB in fp32); this costs the adapters' size. The copy is held in buffers, so a
    checkpoint saves and restores it like any module (`reference.safetensors`)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        tensors = _adapter_tensors(policy)
        if not tensors:
            raise ValueError("AdapterReference needs a LoRA policy (it has no adapter tensors)")
        self.names = [name for name, _ in tensors]
        for name, tensor in tensors:
            self.register_buffer(_buffer_name(name), tensor.detach().clone())

    def copy_from(self, policy: nn.Module) -> None:
        """Take the policy's current adapters as the reference (after its warm start)."""
        with torch.no_grad():
            for frozen, live in zip(self.buffers(), self._live(policy), strict=True):
                frozen.copy_(live)

    @contextlib.contextmanager
    def computing_with(self, policy: nn.Module) -> Iterator[nn.Module]:
        """`policy` computing as the reference: its adapters hold the frozen copy inside the
        block and their own values again after it (copied in place, so the optimizer's
        parameters and any view of them stay the same tensors)."""
        live = self._live(policy)
        with torch.no_grad():
            kept = [tensor.detach().clone() for tensor in live]
            for tensor, frozen in zip(live, self.buffers(), strict=True):
                tensor.copy_(frozen)
        try:
            yield policy
        finally:
            with torch.no_grad():
                for tensor, value in zip(live, kept, strict=True):
                    tensor.copy_(value)

    def _live(self, policy: nn.Module) -> list[nn.Parameter]:
        tensors = dict(_adapter_tensors(policy))
        if list(tensors) != self.names:
            raise ValueError(
                "the policy's adapters are not the ones this reference copied "
                f"({len(tensors)} adapter tensors against {len(self.names)})"
            )
        return list(tensors.values())


def _adapter_tensors(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """Every adapter's LoRA tensors (A and B in every adapted layer), by parameter name."""
    return [(n, p) for n, p in model.named_parameters() if ".lora_A." in n or ".lora_B." in n]


def _buffer_name(parameter_name: str) -> str:
    return parameter_name.replace(".", "__")  # a buffer's name may hold no dot


def adapter_state(model: nn.Module, name: str = DEFAULT_ADAPTER) -> dict[str, torch.Tensor]:
    """Adapter `name`'s tensors only, under PEFT's file names (no adapter name inside keys)."""
    peft = require_peft()
    state = peft.get_peft_model_state_dict(model, adapter_name=name)
    return {k: v.detach().contiguous() for k, v in state.items()}


def load_adapter_state(
    model: nn.Module, state: dict[str, torch.Tensor], name: str = DEFAULT_ADAPTER
) -> None:
    """Load tensors from `adapter_state` back into adapter `name` of `model`; every adapter
    tensor must be there."""
    peft = require_peft()
    current = peft.get_peft_model_state_dict(model, adapter_name=name)
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
    peft.set_peft_model_state_dict(model, state, adapter_name=name)


def adapter_weight_files(model: nn.Module, path: Path) -> dict[str, Path]:
    """Where `save_adapter` writes each adapter's weights under `path`, by adapter name:
    PEFT's layout, the "default" adapter at the top and every other named adapter (a role's)
    in a folder of its name."""
    path = Path(path)
    return {
        name: (path if name == DEFAULT_ADAPTER else path / name) / ADAPTER_WEIGHTS
        for name in adapter_names(model)
    }


def save_adapter(model: nn.Module, path: Path) -> list[Path]:
    """Write every adapter as a PEFT directory (`adapter_config.json` +
    `adapter_model.safetensors`; role adapters each in a folder of their name), which PEFT's
    `PeftModel.from_pretrained` and vLLM's `LoRARequest` load. Returns the files."""
    path = Path(path)
    model.save_pretrained(str(path), safe_serialization=True)
    files = []
    for weights in adapter_weight_files(model, path).values():
        (weights.parent / "README.md").unlink(missing_ok=True)  # PEFT's model-card template
        files += [weights.parent / ADAPTER_CONFIG, weights]
    (path / "README.md").unlink(missing_ok=True)
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

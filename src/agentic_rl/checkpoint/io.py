"""Atomic training checkpoints: policy weights, extra modules, optimizer, trainer state and RNG.

Layout of one checkpoint (`OUT` is the run's output directory)::

    OUT/checkpoints/step_000012/
        model.safetensors          policy state_dict (tied weights stored once); with a model
                                   per role (model.role_policies=models) every role's model,
                                   under models.<role>.*; or for a LoRA
        adapter/                   policy only its adapter, as a PEFT directory (the frozen
                                   base is rebuilt from model.name); with role adapters
                                   (model.role_policies=adapters) adapter/<role>/ for each role
        <name>.safetensors         one per extra module, e.g. value_head.safetensors
        optimizer.pt               {"optimizer": ..., "scheduler": ...}; only in the latest
                                   checkpoint (resumes start there) unless keep_all_optimizers
        trainer_state.json         {"step": 12, ...whatever the trainer passed}
        rng.pt                     torch (+cuda), python `random` and numpy RNG states
        COMPLETE                   marker, written last

Everything is written into `OUT/checkpoints/.tmp-*` and renamed into place only once all files
(and the marker) are on disk, so a crash mid-save never leaves a directory that
`latest_checkpoint` would pick. The file names and the listing / pruning of checkpoints live in
layout.py.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_model
from torch import nn
from torch.optim import Optimizer

from agentic_rl.checkpoint.layout import (
    ADAPTER_DIR,
    COMPLETE_MARKER,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_FILE,
    TMP_PREFIX,
    TRAINER_STATE_FILE,
    CheckpointError,
    check_layout,
    checkpoints_dir,
    drop_optimizer_states,
    latest_checkpoint,
    prune_checkpoints,
    step_dir_name,
)
from agentic_rl.model.lora import (
    ADAPTER_WEIGHTS,
    adapter_weight_files,
    is_lora,
    load_adapter_state,
    save_adapter,
)

_EXTRA_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, most often); the previous one is intact."""


# --------------------------------------------------------------------------------------------
# durability helpers


def _fsync_path(path: Path) -> None:
    """fsync a file or directory so a rename after it cannot be persisted before its data."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # some platforms (Windows) cannot open directories; best effort there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_durable(path: Path, write: Callable[[Path], None]) -> None:
    write(path)
    _fsync_path(path)


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# RNG


def _capture_rng() -> dict[str, Any]:
    """RNG states as plain types/tensors so they load with `torch.load(weights_only=True)`."""
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np
    except ImportError:
        return state
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    # The key array is converted to a tensor: numpy arrays are not allowed by weights_only loads.
    state["numpy"] = (kind, torch.from_numpy(keys.astype("int64")), pos, has_gauss, cached)
    return state


def _restore_rng(state: Mapping[str, Any]) -> None:
    random.setstate(_to_tuple(state["python"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:
            return
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))


def _to_tuple(value: Any) -> Any:
    """`random.setstate` needs tuples all the way down; serialisation may hand back lists."""
    if isinstance(value, list | tuple):
        return tuple(_to_tuple(v) for v in value)
    return value


# --------------------------------------------------------------------------------------------
# save


def _validate_extra_names(extra_modules: Mapping[str, nn.Module]) -> None:
    reserved = {Path(MODEL_FILE).stem}
    for name in extra_modules:
        if not _EXTRA_NAME_RE.match(name) or name in reserved:
            raise ValueError(f"invalid extra module name {name!r} (must be a plain file stem)")


def _write_checkpoint_files(
    tmp: Path,
    step: int,
    model: nn.Module,
    optimizer: Optimizer | None,
    scheduler: Any,
    trainer_state: Mapping[str, Any] | None,
    extra_modules: Mapping[str, nn.Module],
) -> None:
    """Write every checkpoint file into `tmp`, the COMPLETE marker last."""
    if is_lora(model):  # the adapter alone: megabytes instead of the whole model
        for file in save_adapter(model, tmp / ADAPTER_DIR):
            _fsync_path(file)
        _fsync_path(tmp / ADAPTER_DIR)
    else:
        # save_model stores tensors that share storage (tied embeddings) once and records the
        # dropped aliases in the header metadata; load_model re-ties them through the module.
        _write_durable(
            tmp / MODEL_FILE, lambda p: save_model(model, str(p), metadata={"format": "pt"})
        )
    for name, module in extra_modules.items():
        _write_durable(
            tmp / f"{name}.safetensors",
            lambda p, m=module: save_model(m, str(p), metadata={"format": "pt"}),
        )
    if optimizer is not None or scheduler is not None:
        opt_state = {
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
        }
        _write_durable(tmp / OPTIMIZER_FILE, lambda p: torch.save(opt_state, p))
    state = {**dict(trainer_state or {}), "step": int(step)}
    _write_durable(tmp / TRAINER_STATE_FILE, lambda p: _write_json(p, state))
    rng = _capture_rng()
    _write_durable(tmp / RNG_FILE, lambda p: torch.save(rng, p))
    _write_durable(tmp / COMPLETE_MARKER, lambda p: p.write_text(f"{step}\n", encoding="utf-8"))
    _fsync_path(tmp)


def save_checkpoint(
    out_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: Optimizer | None,
    scheduler: Any = None,
    trainer_state: dict[str, Any] | None = None,
    extra_modules: dict[str, nn.Module] | None = None,
    keep_last: int = 2,
    keep_all_optimizers: bool = False,
) -> Path:
    """Atomically save a checkpoint to `out_dir/checkpoints/step_{step:06d}` and return its path.

    `trainer_state` must be JSON-serialisable; `step` is added to it. `keep_last` complete
    checkpoints are kept (the one just written always survives); `keep_last <= 0` keeps all.
    Re-saving an existing step replaces it. The optimizer state stays only in the checkpoint
    just written (older ones keep their weights) unless `keep_all_optimizers` (replay bundles,
    trainer.save_batches, start from older checkpoints).
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    extra_modules = dict(extra_modules or {})
    _validate_extra_names(extra_modules)
    # Fail before touching the disk if the trainer state cannot be written as JSON.
    json.dumps(trainer_state or {})

    root = checkpoints_dir(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / step_dir_name(step)
    # Peak disk use stays at `keep_last` checkpoints: the oldest goes before the new one is
    # written, never the newest complete one, so a failed write still leaves one to resume from.
    if keep_last > 0:
        prune_checkpoints(out_dir, keep_last=max(keep_last - 1, 1))
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=root))
    try:
        _write_checkpoint_files(
            tmp, step, model, optimizer, scheduler, trainer_state, extra_modules
        )
        _move_into_place(tmp, final)
    except (OSError, RuntimeError) as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointWriteError(_write_failure_message(out_dir, step, err)) from err
    except BaseException:
        # A real crash cannot clean up; the leftover .tmp-* dir is removed by the next save.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_path(root)
    prune_checkpoints(out_dir, keep_last=keep_last, protect=final)
    if not keep_all_optimizers and (optimizer is not None or scheduler is not None):
        drop_optimizer_states(out_dir, keep=final)
    return final


def _write_failure_message(out_dir: Path, step: int, err: BaseException) -> str:
    root = checkpoints_dir(out_dir)
    free_gib = shutil.disk_usage(root).free / 2**30
    previous = latest_checkpoint(out_dir)
    kept = f"the last complete one, {previous.name}, is intact" if previous else "none exists yet"
    return (
        f"could not write checkpoint step {step} under {root} ({err}); "
        f"{free_gib:.2f} GiB free on that disk. {kept[0].upper()}{kept[1:]}: free some space "
        "(or set trainer.out_dir / trainer.keep_last) and rerun the same command to resume."
    )


def _move_into_place(tmp: Path, final: Path) -> None:
    """Rename `tmp` to `final`; an existing `final` is moved aside first (rename needs a free
    target for directories) and deleted only after the new one is in place."""
    if not final.exists():
        os.replace(tmp, final)
        return
    old = final.with_name(f"{TMP_PREFIX}old-{final.name}-{os.getpid()}")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(final, old)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(old, final)  # put the previous complete checkpoint back
        raise
    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# load


def _require(path: Path, what: str) -> Path:
    if not path.is_file():
        raise CheckpointError(f"checkpoint file missing: {path} ({what})")
    return path


def _load_module(module: nn.Module, path: Path) -> None:
    try:
        load_model(module, str(path), strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"cannot load {path} into {type(module).__name__}: {err}") from err


def load_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: Optimizer | None = None,
    scheduler: Any = None,
    extra_modules: dict[str, nn.Module] | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Restore a checkpoint directory written by `save_checkpoint`; returns the trainer state.

    Only the parts asked for are loaded (optimizer/scheduler/extra modules when given). Raises
    `CheckpointError` naming the missing path if the directory is absent or incomplete.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    if not (path / COMPLETE_MARKER).is_file():
        raise CheckpointError(
            f"incomplete checkpoint: {path} has no {COMPLETE_MARKER} marker "
            "(the save was interrupted); use latest_checkpoint() to find a complete one"
        )
    if (path / "distributed.json").is_file():  # shards of a torchrun run (sharded.py)
        check_layout(path, world_size=1, sharded=False)
    # Check every needed file before mutating anything, so a failed load leaves state untouched.
    model_file = _model_file(path, model)
    extra_files = {
        name: _require(path / f"{name}.safetensors", f"extra module {name!r}")
        for name in (extra_modules or {})
    }
    state_file = _require(path / TRAINER_STATE_FILE, "trainer state")
    opt_file = None
    if optimizer is not None or scheduler is not None:
        opt_file = _require(path / OPTIMIZER_FILE, "optimizer/scheduler state")
    rng_file = _require(path / RNG_FILE, "RNG state") if restore_rng else None

    if is_lora(model):
        _load_adapter(model, model_file)
    else:
        _load_module(model, model_file)
    for name, module in (extra_modules or {}).items():
        _load_module(module, extra_files[name])
    if opt_file is not None:
        _load_optimizer(opt_file, optimizer, scheduler)
    if rng_file is not None:
        _restore_rng(torch.load(rng_file, map_location="cpu", weights_only=True))
    return json.loads(state_file.read_text(encoding="utf-8"))


def _model_file(path: Path, model: nn.Module) -> Path:
    """The policy's weights file (for a LoRA policy its adapter directory), checking that the
    checkpoint kind matches the model's."""
    adapter_file = path / ADAPTER_DIR / ADAPTER_WEIGHTS
    if is_lora(model):
        if not (path / ADAPTER_DIR).is_dir() and (path / MODEL_FILE).is_file():
            raise CheckpointError(
                f"{path} holds full model weights but the policy has a LoRA adapter "
                "(model.lora_rank > 0): resume with the run's own model.lora_rank=0"
            )
        for name, file in adapter_weight_files(model, path / ADAPTER_DIR).items():
            _require(file, f"LoRA adapter weights of adapter {name!r} (model.role_policies?)")
        return path / ADAPTER_DIR
    if adapter_file.is_file() and not (path / MODEL_FILE).is_file():
        raise CheckpointError(
            f"{path} holds a LoRA adapter only but the policy has none: resume with the run's "
            "own model.lora_rank / model.lora_targets"
        )
    return _require(path / MODEL_FILE, "model weights")


def _load_adapter(model: nn.Module, adapter_dir: Path) -> None:
    """Every adapter of `model` (the one LoRA adapter, or each role's) from `adapter_dir`."""
    for name, path in adapter_weight_files(model, adapter_dir).items():
        try:
            load_adapter_state(model, load_file(str(path)), name)
        except ValueError as err:
            raise CheckpointError(f"cannot load {path}: {err}") from err


def _load_optimizer(path: Path, optimizer: Optimizer | None, scheduler: Any) -> None:
    # optimizer.load_state_dict moves state tensors to each param's device, so CPU is fine here.
    saved = torch.load(path, map_location="cpu", weights_only=True)
    if optimizer is not None:
        if saved.get("optimizer") is None:
            raise CheckpointError(f"{path} holds no optimizer state")
        optimizer.load_state_dict(saved["optimizer"])
    if scheduler is not None:
        if saved.get("scheduler") is None:
            raise CheckpointError(f"{path} holds no scheduler state")
        scheduler.load_state_dict(saved["scheduler"])

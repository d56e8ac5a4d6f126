"""Sharded checkpoints of an FSDP2 run (learner.strategy=fsdp2), with torch.distributed.checkpoint.

Same directory, naming, atomic rename and pruning as io.py; the weights and optimizer
state are written by every process as its own shards::

    OUT/checkpoints/step_000012/
        sharded/                   torch.distributed.checkpoint: .metadata + one file per process
                                   {"model": policy.*, value_head.*, reference.*;
                                    "optimizer": AdamW state keyed by parameter name}
        distributed.json           {"strategy": "fsdp2", "world_size": 2}
        trainer_state.json         as in io.py
        rng_rank{R}.pt             each process's RNG states
        scheduler.pt               only when a scheduler was given
        COMPLETE                   marker, written last (by rank 0, after every shard is on disk)

A checkpoint resumes only with the world size that wrote it: each process restores its own RNG
state and plays its own share of the rollouts, so a different number of processes could not
continue the same run. `agentic-rl export` turns any checkpoint into a plain model directory
(`load_full_policy` reads the shards in one process, without a process group).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.optim import Optimizer

from agentic_rl.checkpoint.io import (
    _capture_rng,
    _fsync_path,
    _move_into_place,
    _restore_rng,
    _validate_extra_names,
    _write_durable,
    _write_json,
)
from agentic_rl.checkpoint.layout import (
    COMPLETE_MARKER,
    LAYOUT_FILE,
    SHARDED_DIR,
    TMP_PREFIX,
    TRAINER_STATE_FILE,
    CheckpointError,
    check_layout,
    checkpoints_dir,
    prune_checkpoints,
    step_dir_name,
)

if TYPE_CHECKING:
    from agentic_rl.scale.fsdp import DataParallel

SCHEDULER_FILE = "scheduler.pt"


def _modules(model: nn.Module, extra: dict[str, nn.Module]) -> nn.ModuleDict:
    """One namespace for the policy and the extra modules, so the optimizer state (which also
    covers the value head) is keyed by unique parameter names."""
    return nn.ModuleDict({"policy": model, **extra})


def save_sharded_checkpoint(
    dp: DataParallel,
    out_dir: Path,
    step: int,
    model: nn.Module,
    optimizer: Optimizer | None,
    scheduler: Any = None,
    trainer_state: dict[str, Any] | None = None,
    extra_modules: dict[str, nn.Module] | None = None,
    keep_last: int = 2,
) -> Path:
    """checkpoint.save_checkpoint for sharded modules; every process calls it at once."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    extra = dict(extra_modules or {})
    _validate_extra_names(extra)
    json.dumps(trainer_state or {})  # fail before writing anything
    root = checkpoints_dir(out_dir)
    final = root / step_dir_name(step)
    tmp_name = None
    if dp.is_main:
        root.mkdir(parents=True, exist_ok=True)
        tmp_name = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{final.name}-", dir=root)
    tmp = Path(dp.broadcast_object(tmp_name))
    modules = _modules(model, extra)
    state: dict[str, Any] = {"model": get_model_state_dict(modules)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(modules, optimizer)
    dcp.save(state, checkpoint_id=tmp / SHARDED_DIR)
    rng = _capture_rng()
    _write_durable(tmp / f"rng_rank{dp.rank}.pt", lambda p: torch.save(rng, p))
    dp.barrier()  # every shard is on disk
    if dp.is_main:
        try:
            if scheduler is not None:
                sched = scheduler.state_dict()
                _write_durable(tmp / SCHEDULER_FILE, lambda p: torch.save(sched, p))
            layout = {"strategy": "fsdp2", "world_size": dp.world_size}
            _write_durable(tmp / LAYOUT_FILE, lambda p: _write_json(p, layout))
            saved = {**dict(trainer_state or {}), "step": int(step)}
            _write_durable(tmp / TRAINER_STATE_FILE, lambda p: _write_json(p, saved))
            _write_durable(tmp / COMPLETE_MARKER, lambda p: p.write_text(f"{step}\n"))
            _fsync_path(tmp)
            _move_into_place(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _fsync_path(root)
        prune_checkpoints(out_dir, keep_last=keep_last, protect=final)
    dp.barrier()  # nobody reads the checkpoint before it is in place
    return final


def load_sharded_checkpoint(
    dp: DataParallel,
    path: Path,
    model: nn.Module,
    optimizer: Optimizer | None = None,
    scheduler: Any = None,
    extra_modules: dict[str, nn.Module] | None = None,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """checkpoint.load_checkpoint for sharded modules; every process calls it at once."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    path = Path(path)
    if not (path / COMPLETE_MARKER).is_file():
        raise CheckpointError(f"not a complete checkpoint: {path} (no {COMPLETE_MARKER} marker)")
    check_layout(path, dp.world_size, sharded=True)
    modules = _modules(model, dict(extra_modules or {}))
    state: dict[str, Any] = {"model": get_model_state_dict(modules)}
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(modules, optimizer)
    try:
        dcp.load(state, checkpoint_id=path / SHARDED_DIR)
    except Exception as err:  # DCP reports missing or mismatched entries in its own types
        raise CheckpointError(f"cannot load {path / SHARDED_DIR}: {err}") from err
    set_model_state_dict(modules, state["model"])
    if optimizer is not None:
        set_optimizer_state_dict(modules, optimizer, state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(path / SCHEDULER_FILE, weights_only=True))
    if restore_rng:
        rng_file = path / f"rng_rank{dp.rank}.pt"
        _restore_rng(torch.load(rng_file, map_location="cpu", weights_only=True))
    return json.loads((path / TRAINER_STATE_FILE).read_text(encoding="utf-8"))


def load_full_policy(path: Path, lm: nn.Module) -> None:
    """Load the policy weights of sharded checkpoint `path` into the unsharded model `lm`, in
    this process alone (no process group): torch.distributed.checkpoint reassembles the
    shards into the full tensors."""
    import torch.distributed.checkpoint as dcp

    root = nn.Module()  # parameter names as under FSDP's root unit (scale/fsdp.py): "lm." + name
    root.lm = lm
    holder = _modules(root, {})
    reader = dcp.FileSystemReader(str(Path(path) / SHARDED_DIR))
    saved = set(reader.read_metadata().state_dict_metadata)
    # state_dict() tensors share the parameters' storage, so the load writes the weights in
    # place; a tied alias that was stored once is filled through its twin.
    wanted = {k: v for k, v in holder.state_dict().items() if f"model.{k}" in saved}
    missing = {k for k in holder.state_dict() if f"model.{k}" not in saved}
    tied = {n for n, p in holder.named_parameters(remove_duplicate=False)} - {
        n for n, p in holder.named_parameters()
    }
    if missing - tied:
        raise CheckpointError(
            f"{path} has no weights for {sorted(missing - tied)[:3]}: wrong model.name?"
        )
    try:
        with warnings.catch_warnings():  # "no process group: loading in one process" is the point
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load({"model": wanted}, storage_reader=reader, no_dist=True)
    except Exception as err:
        raise CheckpointError(f"cannot load the policy from {path}: {err}") from err

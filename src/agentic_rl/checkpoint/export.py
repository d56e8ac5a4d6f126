"""Plain Hugging Face model directories: `save_hf_model` (the end of a run, a stage handing over to
the next) and `agentic-rl export CHECKPOINT --out DIR` (a training checkpoint as such a model).

Works on single-process checkpoints (io.py; a LoRA adapter is merged into the weights)
and on the sharded checkpoints of a torchrun run (sharded.py, read in this one process).
DIR gets config.json, the safetensors weights and the tokenizer; `model.name=DIR` loads it, in
training, evaluation or any transformers code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from torch import nn

from agentic_rl.config.parse import ConfigError, build_dataclass
from agentic_rl.config.rollout import ModelConfig


def resolve_checkpoint(path: Path) -> Path:
    """`path` itself if it is a complete checkpoint, else the latest one of run dir `path`."""
    from agentic_rl.checkpoint.layout import COMPLETE_MARKER, CheckpointError, latest_checkpoint

    path = Path(path)
    if (path / COMPLETE_MARKER).is_file():
        return path
    found = latest_checkpoint(path)
    if found is None:
        raise CheckpointError(f"{path} is neither a complete checkpoint nor a run dir with one")
    return found


def run_model_config(checkpoint: Path, model_name: str | None = None) -> ModelConfig:
    """The `model` settings of the run that wrote `checkpoint` (RUN/config.json, two levels
    up), with `model_name` replacing model.name when given."""
    config_file = checkpoint.parent.parent / "config.json"
    if config_file.is_file():
        cfg = build_dataclass(ModelConfig, json.loads(config_file.read_text())["model"], "model.")
    elif model_name is None:
        raise ConfigError(
            f"{config_file} (the run's settings) is missing: pass --model NAME, the model the "
            "run trained (its architecture and tokenizer)"
        )
    else:
        cfg = ModelConfig()
    if model_name is not None:
        cfg.name = model_name
    return cfg


def export_checkpoint(checkpoint: Path, out: Path, model_name: str | None = None) -> Path:
    """Write the policy of `checkpoint` (a checkpoint or run dir) to `out` as a Hugging Face
    model directory; returns `out`."""
    from agentic_rl.checkpoint.io import load_checkpoint
    from agentic_rl.checkpoint.layout import is_sharded
    from agentic_rl.checkpoint.sharded import load_full_policy
    from agentic_rl.model.load import load_policy

    path = resolve_checkpoint(checkpoint)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} exists and is not empty: choose a new directory")
    policy, tokenizer = load_policy(run_model_config(path, model_name))
    if is_sharded(path):
        load_full_policy(path, policy)
    else:
        load_checkpoint(path, policy, restore_rng=False)
    return save_hf_model(policy, tokenizer, out)


def _cmd_export(args: argparse.Namespace) -> int:
    checkpoint = resolve_checkpoint(Path(args.checkpoint))
    target = export_checkpoint(checkpoint, Path(args.out), args.model)
    print(f"exported {checkpoint} to {target}; train or evaluate it with model.name={target}")
    return 0


def add_export_command(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write a checkpoint (single-process or sharded) as a Hugging Face model dir"
    )
    export.add_argument("checkpoint", help="checkpoint dir (RUN/checkpoints/step_N) or run dir")
    export.add_argument("--out", required=True, help="new directory for the model")
    export.add_argument(
        "--model", help="model.name the run trained (default: from RUN/config.json)"
    )
    export.set_defaults(fn=_cmd_export)


def save_model(model: nn.Module, tokenizer: Any, out: Path) -> Path:
    """Save a Hugging Face model directory that `model.name=OUT/model` loads."""
    return save_hf_model(model, tokenizer, out / "model")


def save_hf_model(model: nn.Module, tokenizer: Any, target: Path) -> Path:
    """Write `target` as a plain Hugging Face model directory (config.json, safetensors
    weights, tokenizer) that `model.name=TARGET` loads."""
    from agentic_rl.model.lora import merged_copy

    merged_copy(model).save_pretrained(target)  # a LoRA policy: adapter folded into the weights
    tokenizer.save_pretrained(target)
    return target

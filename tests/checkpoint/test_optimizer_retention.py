"""Optimizer state (AdamW's moments, twice the weights) is kept only in the latest checkpoint,
the one a resume starts from; older checkpoints keep their weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import CheckpointError, latest_checkpoint, list_checkpoints


def _trained(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_only_the_latest_checkpoint_keeps_optimizer_state(tmp_path):
    model, optimizer = _trained()
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, optimizer, keep_last=0)
    paths = list_checkpoints(tmp_path)
    assert [p.name for p in paths] == ["step_000001", "step_000002", "step_000003"]
    assert [(p / "optimizer.pt").is_file() for p in paths] == [False, False, True]
    assert all((p / "model.safetensors").is_file() for p in paths)  # weights everywhere

    fresh, fresh_opt = _trained(seed=1)
    load_checkpoint(latest_checkpoint(tmp_path), fresh, fresh_opt)  # a resume: the latest
    saved, loaded = optimizer.state_dict()["state"], fresh_opt.state_dict()["state"]
    assert torch.equal(saved[0]["exp_avg"], loaded[0]["exp_avg"])
    load_checkpoint(paths[0], fresh)  # an older one: its weights (export, eval)
    with pytest.raises(CheckpointError, match="optimizer"):
        load_checkpoint(paths[0], fresh, fresh_opt)


def test_keep_all_optimizers_keeps_every_one(tmp_path):
    model, optimizer = _trained()
    for step in (1, 2):
        save_checkpoint(tmp_path, step, model, optimizer, keep_last=0, keep_all_optimizers=True)
    assert all((p / "optimizer.pt").is_file() for p in list_checkpoints(tmp_path))

"""RunLogger's optional Weights & Biases sink: the same metric names as TensorBoard, offline by
default (no account, no network)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from agentic_rl.logging import RunLogger


class FakeRun:
    def __init__(self, **kwargs) -> None:
        self.init = kwargs
        self.logged: list[tuple[dict, int]] = []
        self.finished = False

    def log(self, values: dict, step: int) -> None:
        self.logged.append((values, step))

    def finish(self) -> None:
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    runs: list[FakeRun] = []

    def init(**kwargs):
        runs.append(FakeRun(**kwargs))
        return runs[-1]

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    return runs


def test_metrics_go_to_wandb_under_the_tensorboard_names(tmp_path: Path, fake_wandb) -> None:
    settings = {"project": "p", "name": "run", "config": {"algo": {"name": "grpo"}}}
    with RunLogger(tmp_path, 2, tensorboard=False, progress=False, wandb=settings) as logger:
        logger.log(0, {"success": 0.25}, prefix="eval_before")
        logger.log(1, {"reward": 0.5, "kl": float("nan"), "turns": 2})
    (run,) = fake_wandb
    assert run.init == {"dir": str(tmp_path), "mode": "offline", **settings}
    assert run.logged == [
        ({"eval_before/success": 0.25}, 0),
        ({"train/reward": 0.5, "train/turns": 2}, 1),  # nan is a gap, as in TensorBoard
    ]
    assert run.finished


def test_wandb_mode_comes_from_the_environment(tmp_path, fake_wandb, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "online")
    RunLogger(tmp_path, 1, tensorboard=False, progress=False, wandb={"project": "p"}).close()
    assert fake_wandb[0].init["mode"] == "online"


def test_no_wandb_without_asking(tmp_path, fake_wandb) -> None:
    RunLogger(tmp_path, 1, tensorboard=False, progress=False).close()
    assert fake_wandb == []


def test_a_missing_wandb_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ImportError, match=r"agentic-rl\[wandb\]"):
        RunLogger(tmp_path, 1, tensorboard=False, progress=False, wandb={"project": "p"})


def test_a_real_offline_wandb_run(tmp_path, monkeypatch) -> None:
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = RunLogger(tmp_path, 2, tensorboard=False, progress=False, wandb={"project": "p"})
    logger.log(1, {"reward": 0.5})
    logger.log(2, {"reward": 0.75, "kl": 0.01})
    summary = {k for k in dict(logger._wandb.summary) if not k.startswith("_")}
    assert summary and summary <= {"train/reward", "train/kl"}  # the TensorBoard names
    logger.close()
    (offline,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(offline.glob("run-*.wandb"))

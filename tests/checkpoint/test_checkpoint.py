"""Tests for agentic_rl.checkpoint.io: round trip, tied weights, pruning, atomicity, errors."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from torch import nn

from agentic_rl.checkpoint import io as ckpt
from agentic_rl.checkpoint.io import CheckpointWriteError, load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import (
    COMPLETE_MARKER,
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
)


class TiedLM(nn.Module):
    """A tiny LM whose output projection shares its weight with the embedding."""

    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mid = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(1.0))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(torch.tanh(self.mid(self.embed(ids)))) * self.scale


def _train_steps(model: nn.Module, opt: torch.optim.Optimizer, sched=None, n: int = 3) -> None:
    ids = torch.arange(8) % 11
    for _ in range(n):
        loss = model(ids).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()


def _make(seed: int) -> tuple[TiedLM, torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(seed)
    model = TiedLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def _save(out: Path, step: int, model: nn.Module, **kw) -> Path:
    return save_checkpoint(out, step, model, kw.pop("optimizer", None), **kw)


def test_round_trip_restores_model_optimizer_scheduler_and_rng(tmp_path: Path) -> None:
    model, opt, sched = _make(0)
    _train_steps(model, opt, sched)
    value_head = nn.Linear(6, 1)
    state = {"config": {"lr": 1e-2}, "seed": 7, "metrics_line": 3}

    path = save_checkpoint(
        tmp_path,
        3,
        model,
        opt,
        sched,
        trainer_state=state,
        extra_modules={"value_head": value_head},
    )
    assert path == tmp_path / "checkpoints" / "step_000003"
    assert (path / "model.safetensors").is_file()
    assert (path / "value_head.safetensors").is_file()
    assert (path / COMPLETE_MARKER).is_file()
    # RNG draws right after saving are what a restored run must reproduce.
    expected_torch = torch.rand(4)
    expected_py = random.random()
    np = pytest.importorskip("numpy")
    expected_np = np.random.rand(3)

    model2, opt2, sched2 = _make(123)
    head2 = nn.Linear(6, 1)
    assert not torch.equal(model2.mid.weight, model.mid.weight)
    torch.rand(10)  # move every generator away from the saved state
    random.random()
    np.random.rand(5)

    restored = load_checkpoint(
        path, model2, opt2, sched2, extra_modules={"value_head": head2}, restore_rng=True
    )
    assert restored == {**state, "step": 3}
    for (name, p1), (_, p2) in zip(
        model.state_dict().items(), model2.state_dict().items(), strict=True
    ):
        assert torch.equal(p1, p2), name
    assert torch.equal(head2.weight, value_head.weight)
    # Tied weights stay tied (one tensor) after loading, not two equal copies.
    assert model2.lm_head.weight is model2.embed.weight

    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for pid, st in s1["state"].items():
        assert torch.equal(st["step"], s2["state"][pid]["step"])
        assert float(s2["state"][pid]["step"]) == 3.0
        assert torch.equal(st["exp_avg"], s2["state"][pid]["exp_avg"])
        assert torch.equal(st["exp_avg_sq"], s2["state"][pid]["exp_avg_sq"])
    assert sched2.state_dict()["last_epoch"] == 3
    assert sched2.get_last_lr() == sched.get_last_lr()

    assert torch.equal(torch.rand(4), expected_torch)
    assert random.random() == expected_py
    assert np.array_equal(np.random.rand(3), expected_np)

    # Training continues identically from the restored state.
    _train_steps(model, opt, sched, n=2)
    _train_steps(model2, opt2, sched2, n=2)
    assert torch.allclose(model.embed.weight, model2.embed.weight)


def test_tied_weight_is_stored_once(tmp_path: Path) -> None:
    from safetensors import safe_open

    model, _, _ = _make(0)
    path = _save(tmp_path, 1, model)
    with safe_open(path / "model.safetensors", framework="pt") as f:
        keys = set(f.keys())
        metadata = f.metadata()
    assert len(keys & {"embed.weight", "lm_head.weight"}) == 1
    dropped = ({"embed.weight", "lm_head.weight"} - keys).pop()
    assert metadata[dropped] in keys  # the alias is recorded in the header


def test_restore_rng_false_leaves_generators_alone(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    path = _save(tmp_path, 1, model)
    target = TiedLM()  # built first: initialising it draws from the generator too
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    load_checkpoint(path, target, restore_rng=False)
    assert torch.equal(torch.rand(3), expected)


def test_keep_last_prunes_oldest(tmp_path: Path) -> None:
    model, opt, _ = _make(0)
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, model, optimizer=opt, keep_last=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["step_000003", "step_000004"]
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoints" / "step_000004"


def test_keep_last_zero_keeps_everything(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    for step in (1, 2, 3):
        _save(tmp_path, step, model, keep_last=0)
    assert len(list_checkpoints(tmp_path)) == 3


def test_just_saved_checkpoint_survives_pruning_below_higher_steps(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    for step in (10, 20):
        _save(tmp_path, step, model, keep_last=2)
    path = _save(tmp_path, 5, model, keep_last=1)  # e.g. resumed from an explicit old step
    assert path.is_dir()


def test_resaving_a_step_replaces_it(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    _save(tmp_path, 2, model, trainer_state={"v": 1})
    path = _save(tmp_path, 2, model, trainer_state={"v": 2})
    assert load_checkpoint(path, TiedLM(), restore_rng=False)["v"] == 2
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_000002"]


def test_crash_before_rename_keeps_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt, _ = _make(0)
    first = _save(tmp_path, 1, model, optimizer=opt)

    def boom(src, dst):
        raise OSError("simulated crash during rename")

    monkeypatch.setattr(ckpt.os, "replace", boom)
    with pytest.raises(CheckpointWriteError, match="simulated crash"):
        _save(tmp_path, 2, model, optimizer=opt)
    monkeypatch.undo()

    assert latest_checkpoint(tmp_path) == first
    assert not (tmp_path / "checkpoints" / "step_000002").exists()
    assert load_checkpoint(first, TiedLM(), restore_rng=False)["step"] == 1


def test_crash_replacing_existing_step_restores_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _, _ = _make(0)
    first = _save(tmp_path, 1, model, trainer_state={"v": "old"})
    real_replace = os.replace
    calls = []

    def fail_second(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:  # moving the new dir into place fails after the old one moved aside
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", fail_second)
    with pytest.raises(CheckpointWriteError, match="simulated crash"):
        _save(tmp_path, 1, model, trainer_state={"v": "new"})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == first
    assert load_checkpoint(first, TiedLM(), restore_rng=False)["v"] == "old"


def test_stale_tmp_and_incomplete_dirs_are_ignored_then_cleaned(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    good = _save(tmp_path, 3, model)
    root = tmp_path / "checkpoints"
    # A real crash (kill -9) leaves its temp dir behind, possibly fully written.
    stale = root / ".tmp-step_000009-abc"
    stale.mkdir()
    (stale / COMPLETE_MARKER).write_text("9\n")
    # A step dir without the marker (e.g. copied by hand, partially) is not a checkpoint.
    incomplete = root / "step_000007"
    incomplete.mkdir()
    (incomplete / "model.safetensors").write_bytes(b"partial")

    assert latest_checkpoint(tmp_path) == good
    with pytest.raises(CheckpointError, match="COMPLETE"):
        load_checkpoint(incomplete, TiedLM())

    _save(tmp_path, 4, model)
    assert not stale.exists()
    assert latest_checkpoint(tmp_path) == root / "step_000004"


def test_latest_checkpoint_none_without_checkpoints(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "checkpoints").mkdir()
    assert latest_checkpoint(tmp_path) is None


def test_missing_path_error_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "checkpoints" / "step_000042"
    with pytest.raises(CheckpointError, match="not found") as info:
        load_checkpoint(missing, TiedLM())
    assert str(missing) in str(info.value)


def test_missing_file_error_names_it_and_leaves_model_untouched(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    path = _save(tmp_path, 1, model)  # no optimizer saved
    target = TiedLM()
    before = {k: v.clone() for k, v in target.state_dict().items()}
    target_opt = torch.optim.AdamW(target.parameters())
    with pytest.raises(CheckpointError, match=r"optimizer\.pt"):
        load_checkpoint(path, target, target_opt)
    for k, v in target.state_dict().items():
        assert torch.equal(v, before[k])

    with pytest.raises(CheckpointError, match=r"critic\.safetensors"):
        load_checkpoint(path, TiedLM(), extra_modules={"critic": nn.Linear(6, 1)})


def test_architecture_mismatch_raises_checkpoint_error(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    path = _save(tmp_path, 1, model)
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_checkpoint(path, TiedLM(vocab=5), restore_rng=False)


def test_trainer_state_is_json_and_must_be_serialisable(tmp_path: Path) -> None:
    model, _, _ = _make(0)
    path = _save(tmp_path, 5, model, trainer_state={"seeds": [1, 2]})
    assert json.loads((path / "trainer_state.json").read_text()) == {"seeds": [1, 2], "step": 5}
    with pytest.raises(TypeError):
        _save(tmp_path, 6, model, trainer_state={"bad": object()})
    assert latest_checkpoint(tmp_path) == path
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_full_disk_names_the_problem_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt, _ = _make(0)
    first = _save(tmp_path, 1, model, optimizer=opt)

    def full_disk(obj, f, *args, **kwargs):
        # What torch.save raises when the disk fills up half-way through a file.
        raise RuntimeError(
            "[enforce fail at inline_container.cc:672] . unexpected pos 4708 vs 4700"
        )

    monkeypatch.setattr(ckpt.torch, "save", full_disk)
    with pytest.raises(CheckpointWriteError) as info:
        _save(tmp_path, 2, model, optimizer=opt)
    monkeypatch.undo()

    message = str(info.value)
    assert "checkpoint step 2" in message and "GiB free" in message
    assert "step_000001, is intact" in message
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_000001"]
    assert load_checkpoint(first, TiedLM(), restore_rng=False)["step"] == 1


def test_peak_disk_use_is_keep_last_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, opt, _ = _make(0)
    seen_while_writing: list[int] = []
    write = ckpt._write_checkpoint_files

    def counting_write(*args, **kwargs):
        seen_while_writing.append(len(list_checkpoints(tmp_path)))
        return write(*args, **kwargs)

    monkeypatch.setattr(ckpt, "_write_checkpoint_files", counting_write)
    for step in (1, 2, 3, 4):
        _save(tmp_path, step, model, optimizer=opt, keep_last=2)
    # keep_last=2: one complete checkpoint beside the one being written, two after.
    assert seen_while_writing == [0, 1, 1, 1]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000003", "step_000004"]

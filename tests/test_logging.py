"""Tests for agentic_rl.logging: JSONL records, resume truncation, TensorBoard, console output."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from pathlib import Path

import pytest
import torch

from agentic_rl.logging import RunLogger, format_metrics, read_metrics


def _scalars(tb_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_module_does_not_shadow_stdlib_logging() -> None:
    import agentic_rl.logging as run_logging

    assert logging.getLogger is not None and hasattr(logging, "warning")
    assert run_logging.logging is logging  # the stdlib, imported from inside the package
    assert Path(logging.__file__).parent.name != "agentic_rl"


def test_jsonl_records(tmp_path: Path) -> None:
    with RunLogger(tmp_path, total_steps=3, tensorboard=False, progress=False) as run:
        run.log(1, {"reward": 0.5, "kl": 0.01, "tokens": 812})
        run.log(1, {"reward": 0.75}, prefix="eval")
        run.log(2, {"reward": torch.tensor(0.25), "success": True})
        # Each line is flushed as it is logged, before close.
        assert len(read_metrics(tmp_path / "metrics.jsonl")) == 3

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3
    first = json.loads(lines[0])
    assert set(first) == {"step", "time", "train/reward", "train/kl", "train/tokens"}
    assert first["step"] == 1 and first["train/reward"] == 0.5
    assert first["train/tokens"] == 812 and isinstance(first["train/tokens"], int)
    assert abs(first["time"] - time.time()) < 60
    records = read_metrics(tmp_path)  # a run dir works too
    assert records[1] == {"step": 1, "time": records[1]["time"], "eval/reward": 0.75}
    assert records[2]["train/reward"] == 0.25 and records[2]["train/success"] == 1


def test_appends_across_loggers(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 5, tensorboard=False, progress=False) as run:
        run.log(1, {"reward": 1.0})
    # A killed writer left a partial line; the next record must not be glued onto it.
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 2, "train/rew')
    with RunLogger(tmp_path, 5, tensorboard=False, progress=False) as run:
        run.log(3, {"reward": 3.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 3]


def test_non_finite_values_become_null(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 2, tensorboard=True, progress=False) as run:
        run.log(1, {"loss": float("nan"), "kl": float("inf"), "reward": 1.0})
        run.log(2, {"loss": 0.5, "kl": float("-inf"), "reward": 2.0})
    text = (tmp_path / "metrics.jsonl").read_text()
    assert "NaN" not in text and "Infinity" not in text
    # Strict parsing (rejecting NaN/Infinity constants) succeeds.
    for line in text.splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    first = read_metrics(tmp_path)[0]
    assert first["train/loss"] is None and first["train/kl"] is None
    # Non-finite values are gaps in TensorBoard, not points.
    assert _scalars(tmp_path / "tb", "train/loss") == [(2, 0.5)]
    assert _scalars(tmp_path / "tb", "train/kl") == []
    assert [s for s, _ in _scalars(tmp_path / "tb", "train/reward")] == [1, 2]


def test_non_numeric_metric_is_rejected(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 2, tensorboard=False, progress=False) as run:
        with pytest.raises(TypeError, match="'name'"):
            run.log(1, {"name": "abc"})
        with pytest.raises(TypeError, match="'vec'"):
            run.log(1, {"vec": torch.ones(3)})


def test_resume_truncates_later_steps(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 10, tensorboard=False, progress=False) as run:
        for step in range(1, 7):
            run.log(step, {"reward": float(step)})
            run.log(step, {"reward": -float(step)}, prefix="eval")
    # The run was killed after step 6, the last checkpoint was step 4.
    with RunLogger(tmp_path, 10, tensorboard=False, progress=False, resume_step=4) as run:
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 1, 2, 2, 3, 3, 4, 4]
        for step in range(5, 8):
            run.log(step, {"reward": 10.0 * step})
    records = read_metrics(tmp_path)
    train = [(r["step"], r["train/reward"]) for r in records if "train/reward" in r]
    assert train == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 50.0), (6, 60.0), (7, 70.0)]
    assert not list(tmp_path.glob(".metrics.jsonl.tmp-*"))


def test_resume_without_metrics_file(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 10, tensorboard=False, progress=False, resume_step=4) as run:
        run.log(5, {"reward": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [5]


def test_tensorboard_scalars(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 3, tensorboard=True, progress=False) as run:
        for step in (1, 2, 3):
            run.log(step, {"reward": step / 4, "kl": 0.001 * step})
        run.log(3, {"success": 0.5}, prefix="eval")
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    reward = _scalars(tmp_path / "tb", "train/reward")
    assert [s for s, _ in reward] == [1, 2, 3]
    assert [v for _, v in reward] == pytest.approx([0.25, 0.5, 0.75])
    assert _scalars(tmp_path / "tb", "eval/success") == [(3, 0.5)]


def test_tensorboard_resume_purges_killed_attempt(tmp_path: Path) -> None:
    with RunLogger(tmp_path, 10, tensorboard=True, progress=False) as run:
        for step in range(1, 7):
            run.log(step, {"reward": float(step)})
    with RunLogger(tmp_path, 10, tensorboard=True, progress=False, resume_step=4) as run:
        for step in (5, 6):
            run.log(step, {"reward": 10.0 * step})
    values = dict(_scalars(tmp_path / "tb", "train/reward"))
    assert sorted(values) == [1, 2, 3, 4, 5, 6]
    assert values[4] == 4.0 and values[5] == 50.0 and values[6] == 60.0


def test_missing_tensorboard_warns_and_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A None entry in sys.modules makes the import raise ImportError, like an absent package.
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with (
        caplog.at_level(logging.WARNING, logger="agentic_rl.logging"),
        RunLogger(tmp_path, 2, tensorboard=True, progress=False) as run,
    ):
        run.log(1, {"reward": 1.0})
        run.log(2, {"reward": 2.0})
    warnings = [r for r in caplog.records if "tensorboard" in r.getMessage()]
    assert len(warnings) == 1
    assert not (tmp_path / "tb").exists()
    assert len(read_metrics(tmp_path)) == 2


def test_non_tty_prints_compact_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with RunLogger(tmp_path, 40, tensorboard=False, progress=True) as run:  # capsys: not a TTY
        run.log(
            3,
            {"reward": 0.25, "success": 0.25, "kl": 0.001, "tokens_per_s": 812.4, "loss": 1.5},
        )
        run.log(4, {"reward": float("nan")})
        run.log(4, {"success": 0.5}, prefix="eval")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "step 3/40 reward=0.250 success=0.25 kl=0.001 tok/s=812",
        "step 4/40 reward=nan",
        "eval step 4/40 success=0.50",
    ]


def test_print_every(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with RunLogger(tmp_path, 7, tensorboard=False, progress=False, print_every=3) as run:
        for step in range(1, 8):
            run.log(step, {"reward": 1.0})
    steps = [line.split()[1] for line in capsys.readouterr().out.splitlines()]
    assert steps == ["3/7", "6/7", "7/7"]  # the last step is always shown


def test_forced_progress_bar_renders(tmp_path: Path) -> None:
    stream = io.StringIO()
    with RunLogger(
        tmp_path, 8, tensorboard=False, progress=True, force_progress=True, stream=stream
    ) as run:
        run.log(2, {"reward": 0.5, "success": 0.75})
        run.log(2, {"reward": 0.1}, prefix="eval")
    text = stream.getvalue()
    assert "2/8" in text
    assert "reward=0.500" in text and "success=0.75" in text
    assert "eval step 2/8 reward=0.100" in text
    assert not any(line.startswith("step 2/8") for line in text.splitlines())


def test_progress_disabled_on_tty_falls_back_to_lines(tmp_path: Path) -> None:
    class FakeTTY(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = FakeTTY()
    with RunLogger(tmp_path, 5, tensorboard=False, progress=False, stream=stream) as run:
        run.log(1, {"entropy": 1.23456})
    assert stream.getvalue() == "step 1/5 entropy=1.235\n"


def test_close_is_idempotent_and_log_after_close_fails(tmp_path: Path) -> None:
    run = RunLogger(tmp_path, 1, tensorboard=True, progress=False)
    run.log(1, {"reward": 1.0})
    run.close()
    run.close()
    with pytest.raises(RuntimeError, match="close"):
        run.log(2, {"reward": 1.0})


def test_format_metrics_picks_key_metrics_only() -> None:
    assert format_metrics({"loss": 1.0, "reward_mean": 0.5, "entropy": None}) == (
        "reward=0.500 entropy=nan"
    )
    assert format_metrics({}) == ""

"""bench/distill_vs_sft.py: the summary rows (mean and range over seeds per arm and evaluation
mark, the final row per arm) by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "distill_vs_sft", Path(__file__).resolve().parent.parent / "bench" / "distill_vs_sft.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def _run(*points: tuple[int, float, float]) -> dict:
    return {
        "eval": [{"optimizer_steps": o, "train_seconds": t, "success": s} for o, t, s in points]
    }


def test_summary_by_hand():
    results = {
        "distill": {
            "0": _run((0, 0.0, 0.0), (20, 100.0, 0.5)),
            "1": _run((0, 0.0, 0.1), (20, 140.0, 0.7)),
        },
        "sft": {
            "0": _run((0, 0.0, 0.0), (20, 10.0, 0.2)),
            "1": _run((0, 0.0, 0.0), (20, 30.0, 0.4)),
        },
    }
    rows = bench.summarise(results)
    assert [(r["arm"], r["optimizer_steps"]) for r in rows] == [
        ("distill", 0), ("distill", 20), ("sft", 0), ("sft", 20),
    ]  # fmt: skip
    last = rows[1]
    assert last["seeds"] == 2
    assert last["success"] == pytest.approx(0.6)
    assert (last["success_min"], last["success_max"]) == (0.5, 0.7)
    assert last["train_seconds"] == pytest.approx(120.0)
    assert rows[0]["success"] == pytest.approx(0.05)
    assert rows[3]["success"] == pytest.approx(0.3) and rows[3]["train_seconds"] == pytest.approx(
        20.0
    )

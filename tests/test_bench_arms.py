"""bench/arms.py: the per-arm summary a results file holds for its docs page (the mean over
seeds of each run's numbers), and newer_losses' per-run numbers, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import arms  # noqa: E402
import newer_losses  # noqa: E402


def test_arm_summary_means_over_seeds_by_hand():
    rows = [{"success": 0.8, "gain": None}, {"success": 0.9, "gain": 0.1}, {"success": 0.7}]
    summary = arms.arm_summary(rows)
    assert summary["seeds"] == 3
    assert summary["success"] == pytest.approx(0.8)
    assert summary["gain"] == pytest.approx(0.1)  # the seeds without it are left out
    assert arms.arm_summary([{"gain": None}]) == {"seeds": 1, "gain": None}


def test_newer_losses_run_numbers_by_hand():
    run = {
        "eval": [
            {"step": 0, "success": 0.0, "split": "eval_before"},
            {"step": 0, "success": 0.8, "split": "eval_warm_start"},
            {"step": 10, "success": 0.85, "split": "eval"},
            {"step": 20, "success": 0.9, "split": "eval"},
        ],
        "train": [
            {"step": 1, "entropy": 0.5, "clip_frac": 0.1},
            {"step": 2, "clip_frac": 0.3},  # an update skipped: no entropy
            {"step": 3, "entropy": 0.4, "clip_frac": 0.2},
        ],
    }
    numbers = newer_losses.summary(run)
    assert numbers["before"] == 0.8 and numbers["success"] == 0.9
    assert (numbers["entropy_first"], numbers["entropy_last"]) == (0.5, 0.4)
    assert numbers["clip_frac"] == pytest.approx(0.2)
    assert numbers["mismatch_k3"] is None and numbers["zeroed"] is None
    assert "| ppo | 0.900 | 0.500 -> 0.400 | 0.2000 | - | - |" in newer_losses.table(
        {"ppo": {"0": run}}
    )

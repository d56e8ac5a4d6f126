"""bench/arms.py: the per-arm summary a results file holds for its docs page (the mean over
seeds of each run's numbers), newer_losses' per-run numbers, by hand, and a run stopped by its
time limit."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import arms  # noqa: E402
import newer_losses  # noqa: E402

EVALS = [  # a run's held-out evaluations: before, after the warm start, then RL steps 10 and 20
    {"step": 0, "success": 0.0, "split": "eval_before"},
    {"step": 0, "success": 0.4, "split": "eval_warm_start"},
    {"step": 10, "success": 0.5, "split": "eval"},
    {"step": 20, "success": 0.6, "split": "eval"},
]


def test_arm_summary_means_over_seeds_by_hand():
    rows = [{"success": 0.8, "gain": None}, {"success": 0.9, "gain": 0.1}, {"success": 0.7}]
    summary = arms.arm_summary(rows)
    assert summary["seeds"] == 3
    assert summary["success"] == pytest.approx(0.8)
    assert summary["gain"] == pytest.approx(0.1)  # the seeds without it are left out
    assert (summary["gain_min"], summary["gain_max"]) == (0.1, 0.1)
    assert summary["gain_seeds"] == 1  # of 3 runs
    assert arms.arm_summary([{"gain": None}]) == {
        "seeds": 1,
        "gain": None,
        "gain_min": None,
        "gain_max": None,
        "gain_seeds": 0,
    }
    spread = arms.arm_summary([{"gain": -0.02}, {"gain": 0.12}, {"gain": 0.05}])
    assert spread["gain"] == pytest.approx(0.05)
    assert (spread["gain_min"], spread["gain_max"]) == (-0.02, 0.12)
    assert spread["gain_seeds"] == 3


def test_gain_summary_by_hand():
    run = {
        "eval": EVALS,
        "train": [{"decoded_tokens": 30_000.0}, {"decoded_tokens": 70_000.0}, {"step": 3}],
    }
    numbers = arms.gain_summary(run)
    assert (numbers["before"], numbers["success"]) == (0.4, 0.6)
    assert numbers["gain"] == pytest.approx(0.2)
    assert numbers["gain_per_m_tokens"] == pytest.approx(2.0)  # 0.2 over 0.1M decoded tokens
    assert numbers["decoded_per_step"] == pytest.approx(50_000.0)  # steps that logged it
    untrained = arms.gain_summary({"eval": [{"success": 0.1, "split": "eval_before"}], "train": []})
    assert untrained["before"] == 0.1 and untrained["gain"] is None
    assert untrained["gain_per_m_tokens"] is None and untrained["decoded_per_step"] is None


def test_held_out_curve_starts_where_rl_starts_by_hand(tmp_path):
    run = {"eval": EVALS, "train": []}
    assert arms.held_out_curve(run) == {0: 0.4, 10: 0.5, 20: 0.6}
    cold = {"eval": [{"step": 0, "success": 0.1, "split": "eval_before"}], "train": []}
    assert arms.held_out_curve(cold) == {0: 0.1}
    path = tmp_path / "arms.png"
    arms.plot_arms({"a": {"0": run, "1": cold}, "b": {"0": run}}, path, "title")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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


def test_a_run_past_its_limit_is_kept_under_stopped_and_played_again(tmp_path, monkeypatch):
    """--run-limit-s: the killed run's logged steps go under "stopped" (never "results"); a
    rerun plays it again and, finished, it moves to "results"."""
    limits, real_run = [], subprocess.run

    def fake_run(cmd, *pos, timeout=None, **kw):
        if "agentic_rl.cli" not in cmd:  # anything else the bench runs (platform queries)
            return real_run(cmd, *pos, timeout=timeout, **kw)
        limits.append(timeout)
        value = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in cmd if "=" in a}
        run_dir = Path(value["trainer.out_dir"]) / value["trainer.run_name"]
        run_dir.mkdir(parents=True, exist_ok=True)
        before = {"step": 0, "eval_before/success": 0.1, "eval_before/env/verifier_reward": 0.3}
        lines = [before, {"step": 1, "train/reward": 0.5}]
        cut = '{"step": 2, "train/rew'  # the last line, cut by the kill
        (run_dir / "metrics.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n" + cut)
        if timeout:
            raise subprocess.TimeoutExpired(cmd, timeout)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(arms.subprocess, "run", fake_run)
    args = argparse.Namespace(
        recipe="r", arms=["a"], seeds=[0], steps=2, eval_every=1, overrides=[],
        out=tmp_path / "r.json", run_limit_s=5.0,
    )  # fmt: skip
    assert arms.run_arms(args, {"a": []}, ["reward"], {}) == {}
    data = json.loads(args.out.read_text())
    run = data["stopped"]["a"]["0"]
    assert data["results"] == {} and run["stopped_after_s"] == 5.0
    assert run["train"] == [{"step": 1, "reward": 0.5}]
    assert run["eval"] == [
        {"step": 0, "success": 0.1, "split": "eval_before", "env": {"verifier_reward": 0.3}}
    ]
    args.run_limit_s = 0.0
    results = arms.run_arms(args, {"a": []}, ["reward"], {})
    data = json.loads(args.out.read_text())
    assert list(results["a"]) == ["0"] and "stopped" not in data
    assert "stopped_after_s" not in data["results"]["a"]["0"]
    assert limits == [5.0, None]

"""bench/vs_trl.py's interleaving and round statistics, on hand-made child results (no model)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SPEC = importlib.util.spec_from_file_location("vs_trl", BENCH / "vs_trl.py")
assert SPEC is not None and SPEC.loader is not None
vs_trl = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("vs_trl", vs_trl)
SPEC.loader.exec_module(vs_trl)


def test_rounds_alternate_the_order() -> None:
    first = vs_trl.round_order(["fp32", "bf16"], ["ours", "trl"], 0)
    assert first == [("fp32", "ours"), ("fp32", "trl"), ("bf16", "ours"), ("bf16", "trl")]
    assert vs_trl.round_order(["fp32", "bf16"], ["ours", "trl"], 1) == first[::-1]
    assert vs_trl.round_order(["bf16"], ["ours", "trl"], 2) == [("bf16", "ours"), ("bf16", "trl")]


def test_precisions_parse() -> None:
    assert vs_trl.parse_precisions("bf16") == ["bf16"]
    assert vs_trl.parse_precisions("fp32,bf16") == ["fp32", "bf16"]
    for bad in ("fp16", "bf16,bf16", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            vs_trl.parse_precisions(bad)


def child(framework: str, rnd: int, position: int, steps: list[float]) -> dict:
    """A child result: one warm-up step (ignored, 100 s) then `steps`; rollout = update =
    half the step."""
    records = [
        {
            "warmup": i == 0,
            "step_s": s,
            "rollout_s": s / 2,
            "update_s": s / 2,
            "completion_tokens": 10,
            "mean_completion_len": 5.0,
            "trained_sequences": 2.0,
            "constant_groups": 0,
        }
        for i, s in enumerate([100.0, *steps])
    ]
    return {
        "bench_framework": framework,
        "round": rnd,
        "position": position,
        "precision": "bf16",
        "steps": records,
        "peak_rss_mib": 1000.0 + position,
        "rss_after_load_mib": 500.0,
    }


def test_round_ratios_and_spread_are_hand_computed() -> None:
    children = [
        child("ours", 0, 0, [2.0, 4.0]),  # median 3
        child("trl", 0, 1, [9.0, 9.0]),  # 9 -> ratio 3
        child("trl", 1, 2, [12.0, 12.0]),  # 12
        child("ours", 1, 3, [3.0, 3.0]),  # 3 -> ratio 4
        child("ours", 2, 4, [6.0, 6.0]),  # 6
        child("trl", 2, 5, [12.0, 12.0]),  # 12 -> ratio 2
    ]
    report = vs_trl.precision_report(children, rounds=3)
    assert [row["speedup"] for row in report["rounds"]] == [3.0, 4.0, 2.0]
    assert report["speedup"]["median"] == 3.0
    assert (report["speedup"]["min"], report["speedup"]["max"]) == (2.0, 4.0)
    ours = report["summary"]["ours"]
    assert ours["steps_measured"] == 6  # warm-up steps left out
    # pooled 2, 4, 3, 3, 6, 6 -> sorted 2 3 3 4 6 6: median 3.5
    assert ours["step_s"]["median"] == 3.5 and ours["step_s"]["max"] == 6.0
    assert ours["peak_rss_mib"] == 1004.0  # the largest of the rounds
    assert report["round_medians"]["trl"]["step_s"]["min"] == 9.0
    assert report["rounds"][1]["trl"]["position"] < report["rounds"][1]["ours"]["position"]


def test_trl_attention_per_precision() -> None:
    assert vs_trl.trl_attention("bf16-eager", "bf16") == "eager"
    assert vs_trl.trl_attention("bf16-eager", "fp32") == "sdpa"
    assert vs_trl.trl_attention("eager", "fp32") == "eager"


def test_ours_does_one_update_per_step_as_trl() -> None:
    # TRL: num_iterations=1, steps_per_generation=1 -> one optimizer step on the step's batch.
    # The default recipe's PPO mini-batches (2) would make ours do a pi_old forward and two
    # optimizer steps: more work than TRL's, and a different update.
    for precision in ("fp32", "bf16"):
        cfg = vs_trl.our_config(64, 8, 2, 5e-6, precision, one_micro_batch=True)
        assert (cfg.algo.ppo_mini_batches, cfg.algo.epochs) == (1, 1)
        assert cfg.optim.micro_batch_size == 16 and cfg.algo.kl_coef == 0.0


def trl_child(steps: list[float]) -> dict:
    return {**child("trl", 0, 0, steps), "peak_rss_mib": 1.0}


def test_auto_attention_keeps_the_faster_measured_one() -> None:
    # medians of the measured steps (the 100 s warm-up left out): eager 3 < sdpa 4
    assert (
        vs_trl.faster_attention(
            {"sdpa": trl_child([4.0, 4.0]), "eager": trl_child([3.0, 3.5, 2.0])}
        )
        == "eager"
    )
    assert vs_trl.faster_attention({"eager": trl_child([5.0]), "sdpa": trl_child([4.9])}) == "sdpa"
    # a tie keeps the Transformers default
    assert vs_trl.faster_attention({"eager": trl_child([2.0]), "sdpa": trl_child([2.0])}) == "sdpa"


def test_attention_per_precision_under_each_choice() -> None:
    chosen = {"fp32": "sdpa", "bf16": "eager"}
    assert vs_trl.trl_attention("auto", "bf16", chosen) == "eager"
    assert vs_trl.trl_attention("auto", "fp32", chosen) == "sdpa"
    with pytest.raises(ValueError, match="no calibrated choice for bf16"):
        vs_trl.trl_attention("auto", "bf16", {})
    assert vs_trl.trl_attention("bf16-eager", "bf16") == "eager"
    assert vs_trl.trl_attention("bf16-eager", "fp32") == "sdpa"
    assert vs_trl.trl_attention("eager", "fp32") == "eager"


def test_calibration_runs_each_attention_per_precision_alternating(monkeypatch, tmp_path) -> None:
    calls = []
    step = {
        ("fp32", "sdpa"): 3.0,
        ("fp32", "eager"): 4.0,
        ("bf16", "sdpa"): 5.0,
        ("bf16", "eager"): 2.0,
    }

    def fake_run_child(name, args, log_dir, precision, tag, attention):
        calls.append((name, precision, attention, args.steps, args.warmup))
        return trl_child([step[(precision, attention)]] * args.steps)

    monkeypatch.setattr(vs_trl, "run_child", fake_run_child)
    args = argparse.Namespace(steps=3, warmup=0, calibration_steps=2)
    report = vs_trl.calibrate_trl_attention(args, ["fp32", "bf16"], tmp_path)
    assert [(p, a) for _, p, a, _, _ in calls] == [
        ("fp32", "sdpa"),
        ("fp32", "eager"),
        ("bf16", "eager"),
        ("bf16", "sdpa"),
    ]
    assert all(name == "trl" and steps == 2 and warmup == 1 for name, _, _, steps, warmup in calls)
    assert {p: r["chosen"] for p, r in report.items()} == {"fp32": "sdpa", "bf16": "eager"}
    assert report["bf16"]["median_step_s"] == {"eager": 2.0, "sdpa": 5.0}

"""bench/recipe_runs.py reads a run's RL step records (not its evaluations) and summarises them."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "recipe_runs", Path(__file__).resolve().parent.parent / "bench" / "recipe_runs.py"
)
assert SPEC is not None and SPEC.loader is not None
recipe_runs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(recipe_runs)


def test_step_records_keep_rl_steps_and_quarter_means_are_hand_computed(tmp_path: Path) -> None:
    lines = [
        {"step": 0, "eval_before/success": 0.1},
        *({"step": s, "train/reward": float(s), "train/tool_calls": 2.0} for s in range(1, 9)),
        {"step": 8, "eval_after/success": 0.5},
    ]
    text = "\n".join(json.dumps(r) for r in lines) + '\n{"step": 9, "train/rew'  # a cut line
    (tmp_path / "metrics.jsonl").write_text(text)
    records = recipe_runs.step_records(tmp_path)
    assert [r["step"] for r in records] == list(range(1, 9))
    means = recipe_runs.quarter_means(records)
    # 8 steps: quarters of 2; rewards 1,2 -> 1.5 and 7,8 -> 7.5
    assert means["reward"] == {"first": 1.5, "last": 7.5, "steps": 8}
    assert means["tool_calls"]["last"] == 2.0
    assert "step" not in means and "time" not in means


def test_held_out_line_reads_single_and_staged_summaries() -> None:
    single = {
        "before": {"success": 0.0},
        "warm_start": {"success": 0.5},
        "after": {"success": 0.75},
    }
    assert recipe_runs.held_out_line(single) == "0.00 -> 0.50 -> 0.75"
    staged = {"stages": {"s1": {"after": {"success": 0.25}}, "s2": {"after": {"success": 0.5}}}}
    assert recipe_runs.held_out_line(staged) == "s1: 0.25; s2: 0.50"
    knownself = {
        "stages": {
            "baseline": {"evals": {"before": {"success": 0.0}, "sft_only": {"success": 0.375}}},
            "dpo": {"evals": {}},
        }
    }
    assert recipe_runs.held_out_line(knownself) == "baseline: before 0.00, sft_only 0.38; dpo: -"


def test_progress_prints_each_held_out_evaluation_once(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "recipe"
    (run_dir / "sft").mkdir(parents=True)
    (run_dir / "sft" / "metrics.jsonl").write_text(
        json.dumps({"step": 0, "eval_warm_start/success": 0.25}) + "\n"
    )
    lines = [{"step": 1, "train/success": 1.0}, {"step": 10, "eval/success": 0.5}]
    text = "\n".join(json.dumps(r) for r in lines) + '\n{"step": 11, "eval/succ'  # being written
    (run_dir / "metrics.jsonl").write_text(text)
    os.utime(run_dir / "sft" / "metrics.jsonl", (1, 1))  # the earlier stage, whatever the clock
    printed: set = set()
    recipe_runs.print_progress(run_dir, "[r seed 0]", printed)
    recipe_runs.print_progress(run_dir, "[r seed 0]", printed)  # nothing new: nothing printed
    assert capsys.readouterr().out.splitlines() == [
        "[r seed 0] sft: step 0 eval_warm_start success 0.250",
        "[r seed 0] step 10 eval success 0.500",
    ]

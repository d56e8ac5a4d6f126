"""`agentic-rl report` without a browser: what a run directory gives the page, the sampling of
large trajectory files, the self-contained HTML and the command."""

import json
import re

import pytest

from agentic_rl.cli import main
from agentic_rl.report.data import ReportError, choose_records, eval_rows, load_run, metric_series
from agentic_rl.report.html import render_report, write_report


def test_metric_series_and_eval_rows():
    records = [
        {"step": 0, "time": 100.0, "eval_before/success": 0.25},
        {"step": 1, "time": 160.0, "train/reward": 0.5, "train/kl": None},
        {"step": 2, "time": 220.0, "train/reward": 0.75},
        {"step": 2, "time": 230.0, "eval/success": 0.5, "eval/reward": 1.0},
    ]
    series = metric_series(records)
    assert series["train/reward"] == [[1, 0.5], [2, 0.75]]
    assert "train/kl" not in series  # a missing value is a gap, not a point
    assert series["time/elapsed_minutes"] == [[1, 1.0], [2, 2.0]]
    assert eval_rows(records) == [
        {"stage": "eval_before", "step": 0, "success": 0.25},
        {"stage": "eval", "step": 2, "success": 0.5, "reward": 1.0},
    ]


def test_large_files_are_sampled_by_evenly_spaced_whole_steps():
    heads = [(0, "eval_before")] * 100 + [(s, "train") for s in range(1, 201) for _ in range(32)]
    heads += [(200, "eval")] * 100
    picked = choose_records(heads, 400)
    assert 300 <= len(picked) <= 440
    chosen = {heads[i] for i in picked}
    steps = sorted(s for s, split in chosen if split == "train")
    assert steps[0] == 1 and steps[-1] == 200 and len(steps) > 20  # spread, ends included
    assert (0, "eval_before") in chosen and (200, "eval") in chosen
    per_step = {}
    for i in picked:
        per_step[heads[i]] = per_step.get(heads[i], 0) + 1
    assert len(set(per_step.values())) == 1  # the same number of records from each
    small = [(1, "train")] * 10
    assert choose_records(small, 400) == set(range(10))


def test_a_run_directory_gives_everything_the_page_shows(report_runs):
    run = load_run(report_runs[0])
    assert run["name"] == "grpo" and run["config"]["algo"]["name"] == "grpo"
    assert run["summary"]["steps"] == 2
    for key in ("train/reward", "train/success", "train/kl", "train/entropy", "eval/success"):
        assert run["series"][key], key
    assert {row["stage"] for row in run["evals"]} == {"eval_before", "eval_warm_start", "eval"}
    trajectories = run["trajectories"]
    assert len(trajectories) == run["logged_trajectories"] > 0
    for t in trajectories:
        assert "pieces" not in t
        assert all(str(i) in run["vocab"] for i in t["ids"])
    sampled = load_run(report_runs[0], max_trajectories=8)
    assert len(sampled["trajectories"]) == 8 < len(trajectories)


def test_the_page_is_self_contained(report_runs, tmp_path):
    runs = [load_run(p) for p in report_runs]
    page = render_report(runs)
    # no external script, style, image or font
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(http" not in page
    data = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S)
    assert data is not None
    parsed = json.loads(data.group(1))
    assert [r["name"] for r in parsed["runs"]] == ["grpo", "rloo"]
    assert "Plotly" in page  # plotly.js inlined


def test_the_report_command(report_runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", *map(str, report_runs), "--out", str(out)]) == 0
    assert out.stat().st_size > 1_000_000 and "wrote" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    with pytest.raises(ReportError, match="not a run directory"):
        write_report([tmp_path], tmp_path / "x.html")

"""bench/miniwob_suite.py: the results file from the eval command's JSON (by hand), and the
script end to end on the tiny model over a two-task slice in real headless Chromium (marked
`browser`)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from agentic_rl.envs.browser.driver import browser_available

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from miniwob_suite import main, suite_result  # noqa: E402


def test_suite_result_by_hand():
    printed = {
        "checkpoint": None,
        "model": "m",
        "success": 0.25,
        "reward": 0.1,
        "env/success@click-link": 0.5,
        "env/success@click-button": 0.0,
    }
    result = suite_result(printed, ["agentic-rl", "eval"], 4, 12.34)
    assert result["per_task"] == {"click-button": 0.0, "click-link": 0.5}  # sorted by name
    assert result["tasks"] == 2 and result["tasks_solved"] == 1 and result["success"] == 0.25
    assert result["command"] == "agentic-rl eval" and result["wall_seconds"] == 12.3
    with pytest.raises(SystemExit, match="no env/success@TASK metric"):
        suite_result({"success": 0.0}, [], 1, 1.0)


@pytest.mark.browser
@pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)
def test_the_script_evaluates_a_slice_and_writes_the_file(tmp_path):
    out = tmp_path / "suite.json"
    tasks = "env.options.tasks=click-button,click-link"
    assert main(["--eval-tasks", "2", "--set", "model.name=tiny", tasks, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["per_task"]) == {"click-button", "click-link"}
    assert result["eval_tasks"] == 2 and result["model"] == "tiny"
    assert 0.0 <= result["success"] <= 1.0 and "env.num_eval_tasks=2" in result["command"]

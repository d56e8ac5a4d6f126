"""The alignment stage of a grafted vision tower (train/vision_align.py)."""

from __future__ import annotations

import json

from agentic_rl.envs.visual import make_visual_qa_tasks
from agentic_rl.model.vision import spec_of_dir
from agentic_rl.train.vision_align import accuracy, align_vision
from agentic_rl.types import Trajectory


def sample(success: float) -> list[Trajectory]:
    return [Trajectory([1], [0], [0.0], 1, metrics={"success": success})]


def test_accuracy_per_kind_and_majority_baseline():
    tasks = make_visual_qa_tasks("eval", 4, kinds=["count", "colour"])
    assert [t.fields["kind"] for t in tasks] == ["count", "colour"] * 2
    tasks[2].answers = [tasks[0].answers[0]]  # two count questions with the same answer
    tasks[1].answers, tasks[3].answers = ["red"], ["blue"]  # two colours, one each
    got = accuracy([sample(1.0), sample(0.0), sample(0.0), sample(1.0)], tasks)
    assert got["accuracy"] == 0.5
    assert got["accuracy/count"] == 0.5 and got["accuracy/colour"] == 0.5
    assert got["majority/count"] == 1.0  # both count questions share their answer
    assert got["majority/colour"] == 0.5 and got["majority"] == 0.75


def test_stage_trains_saves_and_reports(tmp_path, tiny_vlm_dir, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))  # images written there
    out = tmp_path / "aligned"
    result = align_vision(
        str(tiny_vlm_dir),
        out,
        train_tasks=8,
        eval_tasks=5,
        epochs=1,
        batch_size=4,
        freeze_text=True,
    )
    assert result["sft"]["steps"] == 2 and result["trained"] == "vision tower + connector"
    assert 0.0 <= result["after"]["accuracy"] <= 1.0 and "accuracy/colour" in result["after"]
    assert spec_of_dir(str(out)) == spec_of_dir(str(tiny_vlm_dir))  # a loadable VLM directory
    assert json.loads((out / "alignment.json").read_text())["train_examples"] == 8

"""The `onpolicy_distill` recipe on the tiny model: the teacher (a model directory or a run
directory) scores the student's own tokens and the advantages are the per-token reverse KL.

Mechanism checked: a teacher equal to the student's starting weights teaches nothing (reverse KL
exactly 0 at the first step, no update); another teacher gives a positive mean reverse KL on
the student's samples and moves the weights; a run directory works as the teacher; a missing
teacher fails before any model loads, naming distill.teacher.
"""

from __future__ import annotations

from agentic_rl.cli import main
from agentic_rl.logging import read_metrics
from agentic_rl.model.load import tiny_model
from agentic_rl.train import setup

SMOKE = ["model.name=tiny", "trainer.progress=false"]
FAST = ["trainer.steps=1", "rollout.max_turns=1"]


def teacher_dir(tmp_path, tokenizer, seed):
    """A tiny random model (same vocabulary) saved as a Hugging Face model directory."""
    out = tmp_path / f"teacher{seed}"
    tiny_model(len(tokenizer), seed=seed).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def train_rows(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if "train/reward" in r]


def run(tmp_path, name, teacher, *extra):
    out = [f"trainer.out_dir={tmp_path}", f"trainer.run_name={name}", f"distill.teacher={teacher}"]
    assert main(["train", "onpolicy_distill", *SMOKE, *out, *extra, "--smoke"]) == 0
    return train_rows(tmp_path / name)


def test_a_teacher_equal_to_the_student_teaches_nothing(tmp_path, tokenizer):
    teacher = teacher_dir(tmp_path, tokenizer, seed=0)  # the student's initial weights
    rows = run(tmp_path, "same", teacher, *FAST)
    assert rows[0]["train/distill_reverse_kl"] == 0.0
    assert rows[0]["train/skipped_update"] == 1.0  # every advantage is exactly 0


def test_another_teacher_moves_the_student_and_a_run_dir_teaches_too(tmp_path, tokenizer):
    rows = run(tmp_path, "other", teacher_dir(tmp_path, tokenizer, seed=1))
    assert len(rows) == 2
    for row in rows:
        # E_student[log s - log t] = KL(s || t) > 0, but between two near-uniform random models
        # it is tiny and the sampled mean may fall on either side: it is only never exactly 0
        assert row["train/distill_reverse_kl"] != 0.0
        assert row["train/skipped_update"] == 0.0 and row["train/nonzero_adv_fraction"] == 1.0
    # the run just written (its config.json and latest checkpoint) as the teacher, with RL added
    rows = run(tmp_path, "from_run", tmp_path / "other", "distill.task_reward=true", *FAST)
    assert all("train/distill_teacher_logprob" in row for row in rows)


def test_a_missing_teacher_fails_before_any_model_loads(tmp_path, capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(setup, "load_role_policies", no_model)
    out = [f"trainer.out_dir={tmp_path}", f"distill.teacher={tmp_path / 'nowhere'}"]
    assert main(["train", "onpolicy_distill", *SMOKE, *out, "--smoke"]) == 2  # a user error
    assert "distill.teacher=" in capsys.readouterr().err

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from agentic_rl.checkpoint.layout import latest_checkpoint
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.logging import read_metrics
from agentic_rl.train.loop import train

TINY = [
    "model.name=tiny",
    "algo.entropy_coef=0.01",  # random-token episodes all score alike: keep updates non-trivial
    "trainer.progress=false",
]


def tiny_cfg(out: Path, steps: int, *extra: str):
    return load_config(
        None,
        [*TINY, f"trainer.out_dir={out}", "trainer.run_name=run", f"trainer.steps={steps}", *extra],
        smoke=True,
    )


def final_weights(run: Path):
    return load_file(str(latest_checkpoint(run) / "model.safetensors"))


def metric_rows(run: Path):
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "train/reward" in r]
    return {
        r["step"]: {
            k: v
            for k, v in r.items()
            if "seconds" not in k and k != "time" and "tokens_per_s" not in k
        }
        for r in rows
    }


def test_smoke_run_writes_everything(tmp_path):
    summary = train(tiny_cfg(tmp_path, 2))
    run = tmp_path / "run"
    for key in ("recipe", "before", "after", "eval_tasks", "wall_seconds", "warm_start"):
        assert key in summary
    assert {"success", "tool_calls_per_episode"} <= set(summary["after"])
    assert json.loads((run / "summary.json").read_text()) == summary
    rows = metric_rows(run)
    assert sorted(rows) == [1, 2]
    for key in (
        "reward",
        "success",
        "zero_variance_groups",
        "clip_frac",
        "kl",
        "entropy",
        "response_tokens",
        "turns",
        "tool_calls_per_episode",
        "invalid_actions_per_episode",
        "tokens_per_s",
    ):
        assert any(f"train/{key}" in r for r in read_metrics(run / "metrics.jsonl")), key
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert latest_checkpoint(run).name == "step_000002"


def test_resume_reproduces_an_uninterrupted_run(tmp_path):
    train(tiny_cfg(tmp_path / "a", 4))
    train(tiny_cfg(tmp_path / "b", 2))
    train(tiny_cfg(tmp_path / "b", 4))  # resumes from step 2
    wa, wb = final_weights(tmp_path / "a" / "run"), final_weights(tmp_path / "b" / "run")
    assert wa.keys() == wb.keys()
    for key in wa:
        assert (wa[key] == wb[key]).all(), key
    ra, rb = metric_rows(tmp_path / "a" / "run"), metric_rows(tmp_path / "b" / "run")
    assert sorted(rb) == [1, 2, 3, 4]  # no duplicated steps after the resume
    assert ra == rb


@pytest.mark.slow
def test_sigkill_mid_run_loses_at_most_the_current_step(tmp_path):
    args = [a for a in TINY] + [
        f"trainer.out_dir={tmp_path / 'k'}",
        "trainer.run_name=run",
        "trainer.steps=6",
    ]
    cmd = [sys.executable, "-m", "agentic_rl.cli", "train", "--smoke", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    run = tmp_path / "k" / "run"
    deadline = time.time() + 300
    while time.time() < deadline:
        ckpt = latest_checkpoint(run) if run.exists() else None
        if ckpt is not None and ckpt.name >= "step_000003":
            break
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = latest_checkpoint(run).name
    assert killed_at < "step_000006"
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming from" in done.stdout
    train(tiny_cfg(tmp_path / "ref", 6))
    wa, wb = final_weights(tmp_path / "ref" / "run"), final_weights(run)
    for key in wa:
        assert (wa[key] == wb[key]).all(), key
    assert sorted(metric_rows(run)) == [1, 2, 3, 4, 5, 6]


def count_evaluations(monkeypatch) -> list[int]:
    """A list that grows by one each time the trainer runs a held-out evaluation."""
    from agentic_rl.train import loop

    calls: list[int] = []
    real = loop.eval_episodes

    def counted(setup):
        calls.append(1)
        return real(setup)

    monkeypatch.setattr(loop, "eval_episodes", counted)
    return calls


def test_the_last_steps_evaluation_is_the_final_one(tmp_path, monkeypatch):
    """eval_every dividing the last step: that step's held-out evaluation is the run's "after"
    (greedy, same weights), not run a second time."""
    calls = count_evaluations(monkeypatch)
    summary = train(tiny_cfg(tmp_path, 2, "trainer.eval_every=1", "warm_start.num_tasks=0"))
    evals = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "eval/success" in r]
    assert [r["step"] for r in evals] == [1, 2]
    assert len(calls) == 3  # before RL, step 1, step 2 (= after)
    assert summary["after"]["success"] == evals[-1]["eval/success"]


def test_eval_untrained_false_skips_only_the_loaded_models_evaluation(tmp_path, monkeypatch):
    """trainer.eval_untrained=false: the warm-started model is still evaluated before RL (the
    point RL's gain is measured from), the model as loaded is not; one evaluation fewer."""
    calls = count_evaluations(monkeypatch)
    summary = train(tiny_cfg(tmp_path, 1, "trainer.eval_untrained=false"))
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert not any("eval_before/success" in r for r in rows)
    assert any("eval_warm_start/success" in r for r in rows)
    assert "before" not in summary and "warm_start" in summary
    assert len(calls) == 2  # after the warm start, after RL


def test_eval_untrained_without_eval_before_is_refused():
    with pytest.raises(ConfigError, match="trainer.eval_untrained is set but does nothing"):
        load_config(None, [*TINY, "trainer.eval_before=false", "trainer.eval_untrained=false"])
    with pytest.raises(ConfigError, match="trainer.eval_untrained is set but does nothing"):
        load_config(None, [*TINY, "trainer.eval_before=false", "trainer.eval_untrained=true"])
    load_config(None, [*TINY, "trainer.eval_before=false"])  # the default says nothing


def test_recovery_demonstrations_reach_the_warm_start(tmp_path, monkeypatch, capsys):
    """warm_start.recovery_fraction=1: the warm start trains on episodes that show the env's
    scripted mistake, its tokens untrained, and says how many did."""
    from agentic_rl.train import loop
    from agentic_rl.train.collect import has_untrained_turn

    trained: list = []
    real = loop.warm_start_sft

    def recorded(cfg, model, trajectories, *args, **kwargs):
        trained.extend(trajectories)
        return real(cfg, model, trajectories, *args, **kwargs)

    monkeypatch.setattr(loop, "warm_start_sft", recorded)
    # a recovery takes three turns (the mistake, the search, the answer): smoke allows two
    cfg = tiny_cfg(
        tmp_path,
        1,
        "warm_start.recovery_fraction=1.0",
        "rollout.max_turns=4",
        "trainer.eval_before=false",
    )
    train(cfg)
    opened = [t for t in trained if has_untrained_turn(t)]
    assert opened and all(t.num_generated for t in trained)
    assert f"warm start: {len(opened)} of {len(trained)} expert episodes show" in (
        capsys.readouterr().out
    )

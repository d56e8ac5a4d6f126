"""Replay bundles (trainer.save_batches) and `agentic-rl replay`: a replayed step equals the
logged one, through the trainer's own shaping, filters, advantages and update."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentic_rl.checkpoint.layout import checkpoints_dir, step_dir_name
from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.train.bundles import BundleError, bundle_dir, read_bundle
from agentic_rl.train.loop import train
from agentic_rl.train.replay import replay_step

TINY = [
    "model.name=tiny",
    "algo.entropy_coef=0.01",
    "trainer.progress=false",
    "trainer.eval_before=false",
    "env.num_eval_tasks=1",
    "trainer.save_batches=true",
    "trainer.save_every=1",
    "trainer.keep_last=0",
]


def _run(tmp_path: Path, *extra: str) -> Path:
    cfg = load_config(
        None,
        [*TINY, f"trainer.out_dir={tmp_path}", "trainer.run_name=run", "trainer.steps=2", *extra],
        smoke=True,
    )
    train(cfg)
    return tmp_path / "run"


@pytest.fixture(scope="module")
def overlong_run(tmp_path_factory) -> Path:
    """A run whose rewards are shaped (DAPO's overlong penalty) and whose update takes two
    optimizer steps (two PPO mini-batches), so replay must undo the shaping and needs the
    optimizer state of the checkpoint it starts from."""
    return _run(
        tmp_path_factory.mktemp("replay"),
        "filters.overlong_buffer=96",  # the most the smoke run can generate: 2 turns x 48
        "algo.ppo_mini_batches=2",
    )


def test_bundle_holds_the_step(overlong_run):
    bundle = read_bundle(bundle_dir(overlong_run, 2))
    data = bundle.data
    assert data["step"] == 2 and data["weights"]["checkpoint"].endswith("step_000001")
    assert data["config"]["filters"]["overlong_buffer"] == 96
    assert data["code"]["version"]
    samples = data["samples"]
    assert len(samples) == 4 and len(bundle.advantages) == len(data["kept"]) == 4
    # the trained reward carries the penalty; the bundle keeps the outcome before it too
    assert any(s["reward"] < s["outcome_reward"] for s in samples)
    assert [s.reward for ep in bundle.samples for s in ep] == [s["outcome_reward"] for s in samples]
    ids = bundle.samples[0][0].token_ids
    assert len(ids) == len(bundle.samples[0][0].loss_mask) and ids[0] >= 0


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    """PPO with a KL term after the warm start: the checkpoint holds the value head and the
    warm-started reference besides the policy, and the advantages (GAE) are non-zero."""
    return _run(tmp_path_factory.mktemp("replay_ppo"), "algo.name=ppo", "algo.kl_coef=0.01")


def _check_replay(run: Path, step: int, *metrics: str) -> None:
    result = replay_step(bundle_dir(run, step), rtol=1e-6)
    assert result.advantages_equal, "advantages differ"
    assert result.tokens > 0 and result.rows == 4
    for name in ("loss", "grad_norm", "entropy", "reward", *metrics):
        assert name in result.logged, name
    differing = {k: (result.logged[k], result.replayed[k]) for k in result.mismatched}
    assert result.mismatched == [], differing
    assert result.replayed["optimizer_steps"] == 2  # two PPO mini-batches (the recipe's)
    assert all("code" in note for note in result.notes)  # no missing optimizer state


@pytest.mark.parametrize("step", [1, 2])
def test_replayed_step_equals_the_logged_one(overlong_run, step):
    _check_replay(overlong_run, step, "overlong_penalty")


def test_replayed_ppo_step_equals_the_logged_one(ppo_run):
    bundle = read_bundle(bundle_dir(ppo_run, 2))
    assert any(float(a.abs().sum()) > 0 for a in bundle.advantages)
    _check_replay(ppo_run, 2, "value_loss", "kl")


def test_replay_runs_the_shaping_again(overlong_run, monkeypatch):
    """Without the reward shaping stage the replay no longer matches: it is rerun, not read."""
    from agentic_rl.train import shaping

    monkeypatch.setattr(shaping, "overlong_penalty", lambda *a, **k: {})
    result = replay_step(bundle_dir(overlong_run, 2))
    assert not result.ok


def test_replay_needs_the_checkpoint_of_the_step_before(overlong_run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(overlong_run, copy)
    shutil.rmtree(checkpoints_dir(copy) / step_dir_name(1))
    with pytest.raises(BundleError, match="trainer.save_every=1"):
        replay_step(bundle_dir(copy, 2))


def test_cli_replay(overlong_run, capsys):
    assert main(["replay", str(overlong_run), "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "advantages and loss mask identical" in out and "grad_norm" in out
    assert main(["replay", str(overlong_run)]) == 2  # a run dir needs --step
    assert "--step" in capsys.readouterr().err


def test_save_batches_keeps_optimizer_state_in_every_checkpoint(overlong_run):
    for step in (0, 1, 2):
        assert (checkpoints_dir(overlong_run) / step_dir_name(step) / "optimizer.pt").is_file()


def test_save_batches_refuses_unreplayable_runs():
    with pytest.raises(ConfigError, match="rollout.max_staleness=0"):
        load_config(None, ["trainer.save_batches=true", "rollout.max_staleness=1"])


def test_tensors_are_compact(overlong_run):
    from safetensors.torch import load_file

    tensors = load_file(str(bundle_dir(overlong_run, 1) / "tensors.safetensors"))
    assert tensors["token_ids"].dtype == torch.int32 and tensors["loss_mask"].dtype == torch.int8

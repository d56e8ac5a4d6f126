"""The `vla_rl` recipe: manipulation as dialogue with discretised action tokens, dense progress
plus success reward, PPO with a critic, after a scripted-expert warm start.

Mechanisms checked: the action comes out as one vocabulary token per dimension and the rollout
keeps those sampled ids (the action decodes from the trajectory's own tokens back to the bins
the policy chose); a malformed or out-of-range action is an error observation, VLA-RL's -1 and
a counted `invalid_action`, never a crash; the run trains PPO with a critic (value loss) on the
progress + success reward.
"""

from __future__ import annotations

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.code_words import CODE_WORDS, code_word_ids
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build

pytest.importorskip("pymunk")
SMOKE = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def test_recipe_is_vla_rl_ppo():
    cfg = load_config("vla_rl", [])
    assert cfg.algo.name == "ppo" and cfg.algo.critic == "separate"
    assert (cfg.algo.gamma, cfg.algo.lam, cfg.algo.clip_low) == (0.99, 0.95, 0.2)
    assert cfg.env.format_penalty == 1.0  # VLA-RL: -1 for an unparsable action
    assert cfg.warm_start.num_tasks > 0


def test_smoke_trains_ppo_with_a_critic(tmp_path, scripted, warm_start_episodes):
    scripted(lambda ep, i, turn: ep.env.expert_turn() if i % 2 == 0 else "<action>jump</action>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=vla", "rollout.group_size=2"]
    assert main(["train", "vla_rl", *SMOKE, *out, "--smoke"]) == 0
    assert warm_start_episodes(tmp_path / "vla") == 8
    rows = [r for r in read_metrics(tmp_path / "vla" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
    for row in rows:
        assert row["train/success"] == 0.5 and row["train/value_loss"] > 0


def test_action_tokens_decode_from_the_trajectory_and_bad_actions_are_data(scripted, tokenizer):
    setup = build(load_config("vla_rl", SMOKE, smoke=True))
    num_bins = setup.cfg.env.options["num_bins"]
    ids_of = code_word_ids(tokenizer, num_bins)
    bin_of_id = {i: k for k, i in enumerate(ids_of)}
    chosen: dict[int, list[list[int]]] = {}

    def policy(ep, index, turn):
        if index == 1:  # malformed, then out of range (a bin past num_bins), then garbage
            bad = [
                "<action>exfol exfol</action>",
                f"<action>exfol exfol {CODE_WORDS[100]}</action>",
            ]
            return bad[turn] if turn < 2 else "<action>go left now</action>"
        bins = ep.env.expert_bins()
        chosen.setdefault(index, []).append(bins)
        return f"<action>{ep.env.codec.encode_bins(bins)}</action>"

    tasks = setup.train_tasks[:1] * 2
    expert, bad = (e[0] for e in play(setup, tasks, ["g", "g"], scripted(policy), seed=0))
    # each expert turn's sampled ids hold one action token per dimension, the chosen bins
    for (start, end), bins in zip(expert.turn_spans, chosen[0], strict=True):
        turn = expert.token_ids[start:end]
        assert [bin_of_id[i] for i in turn if i in bin_of_id] == bins
        assert all(expert.loss_mask[start:end])
    assert expert.metrics["success"] == 1.0 and expert.metrics["invalid_actions"] == 0
    assert expert.reward > 1.0  # progress + success
    # the bad episode: every turn an error observation, -1 and a counted invalid action
    turns = len(bad.step_rewards)
    assert turns >= 3 and bad.step_rewards == [-1.0] * turns
    assert bad.metrics["invalid_actions"] == turns and bad.metrics["success"] == 0.0
    text = bad.completion_text
    assert "expected 3 action tokens, got 2" in text and "out of range" in text
    assert "'go' is not an action token" in text

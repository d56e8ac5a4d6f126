"""algo.ppo_mini_batches, algo.recompute_old_logprobs, algo.rollout_correction(_cap): the
"auto" default, the caps, and the settings that cannot act."""

import pytest

from agentic_rl.config.algo import rollout_correction
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError

ONE_STEP = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2"]


@pytest.mark.parametrize(
    ("overrides", "want"),
    [
        ([], ("none", 0.0)),  # HF in fp32 against an fp32 learner: one distribution
        (["rollout.mixed_precision=bf16"], ("tis", 2.0)),  # bf16 rollouts, fp32 learner
        (["rollout.mixed_precision=bf16", "learner.mixed_precision=bf16"], ("none", 0.0)),
        (["rollout.backend=vllm"], ("tis", 2.0)),  # another engine
        (["rollout.top_p=0.9"], ("tis", 2.0)),  # behaviour logprobs of the nucleus
        (["rollout.top_p=0.9", "algo.rollout_correction_cap=3"], ("tis", 3.0)),
        (["rollout.top_p=0.9", "algo.recompute_old_logprobs=false"], ("none", 0.0)),
        (
            ["rollout.top_p=0.9", "algo.policy_loss=gspo", "algo.clip_high=0.2"],
            ("mis_seq_geo", 1.01),
        ),
        (["algo.rollout_correction=mis_token"], ("mis_token", 2.0)),
        (["algo.rollout_correction=none", "rollout.backend=vllm"], ("none", 0.0)),
        (["rollout.max_staleness=1"], ("tis", 5.0)),  # decoupled PPO: algo.stale_is_cap
    ],
)
def test_rollout_correction_defaults(overrides, want):
    assert rollout_correction(load_config(None, overrides)) == want


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.ppo_mini_batches=0"], "algo.ppo_mini_batches must be >= 1"),
        (["algo.rollout_correction=is"], "algo.rollout_correction: 'is' is not one of"),
        (["algo.rollout_correction=tis", "algo.rollout_correction_cap=0.5"], "must be >= 1"),
        (["algo.rollout_correction_cap=3"], "rollout_correction_cap is set but does nothing"),
        (
            ["algo.rollout_correction=tis", "algo.recompute_old_logprobs=false"],
            "needs algo.recompute_old_logprobs=true",
        ),
        (
            ["algo.rollout_correction=tis", "algo.policy_loss=gspo", "algo.clip_high=0.2"],
            "use mis_seq_geo, auto or none",
        ),
        (
            ["rollout.max_staleness=1", "algo.rollout_correction=mis_token"],
            "decoupled PPO's truncated weight",
        ),
        (
            ["rollout.max_staleness=1", "algo.rollout_correction_cap=3"],
            "capped by algo.stale_is_cap",
        ),
        (["rollout.max_staleness=1", "algo.recompute_old_logprobs=false"], "proximal policy"),
        (["rollout.train_on_observations=true"], "needs algo.ppo_mini_batches=1"),
        ([*ONE_STEP, "algo.dual_clip=3"], "algo.dual_clip is set but does nothing"),
    ],
)
def test_settings_that_cannot_act_fail_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_one_step_without_recomputation_lets_the_clip_act():
    """pi_old = the behaviour logprobs: the ratio is pi / pi_behav even in one step."""
    cfg = load_config(None, [*ONE_STEP, "algo.recompute_old_logprobs=false", "algo.dual_clip=3"])
    assert cfg.algo.dual_clip == 3


def test_recipes_take_the_papers_mini_batch_ratio():
    assert load_config("dapo_math").algo.ppo_mini_batches == 16  # 512 prompts / 32
    assert load_config("search_qa_grpo").algo.ppo_mini_batches == 2  # Search-R1: 512 / 256
    assert load_config("search_r1_grpo").algo.ppo_mini_batches == 2

"""Config keys of the algorithm suite: each invalid combination fails at load naming the keys."""

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError

GSPO = ["algo.policy_loss=gspo", "algo.clip_high=0.2"]  # the default recipe sets clip_high 0.28
STEP = ["rollout.mode=step"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.name=gigpo"], "algo.name=gigpo .* set rollout.mode=step"),
        (["algo.name=gigpo", *STEP], "env.name=search_qa does not expose"),
        ([*GSPO, "algo.loss_agg=token-mean"], "algo.loss_agg must be seq-mean-token-mean"),
        ([*GSPO, "algo.loss_agg=seq-mean-token-sum-norm"], "algo.policy_loss=gspo"),
        (["algo.policy_loss=gspo"], "algo.clip_high is set but does nothing"),
        ([*GSPO, "algo.name=reinforce_pp"], "needs one advantage per sequence"),
        ([*GSPO, "algo.dual_clip=3"], "algo.dual_clip applies to the token-level"),
        ([*GSPO, "algo.gspo_clip_low=1.5"], "algo.gspo_clip_low must be in"),
        (["algo.policy_loss=sppo"], "algo.policy_loss: 'sppo' is not one of"),
        (["algo.gspo_clip_high=0.01"], "algo.gspo_clip_high is set but does nothing"),
        (["gigpo.omega=0.5"], "gigpo.omega is set but does nothing"),
        (["gigpo.norm=bogus"], "gigpo.norm: 'bogus'"),
        (["gigpo.similarity_threshold=0"], "gigpo.similarity_threshold must be in"),
        (["gigpo.gamma=1.5"], "gigpo.gamma must be in"),
        (["rollout.history_window=3"], "rollout.history_window is set but does nothing"),
        (["rollout.mode=tree"], "rollout.mode: 'tree'"),
        ([*STEP, "algo.name=ppo"], "rollout.mode=step needs an estimator that credits the samples"),
        ([*STEP, "rollout.history_window=-1"], "rollout.history_window must be >= 0"),
        (["filters.max_gen_batches=0"], "filters.max_gen_batches must be >= 1"),
        (["filters.max_gen_batches=5"], "filters.max_gen_batches is set but does nothing"),
        (["filters.dynamic_sampling=true", "filters.metric=acc"], "filters.metric: 'acc' is not"),
        (["filters.metric=reward"], "filters.metric is set but does nothing"),
        (
            ["filters.dynamic_sampling=true", "rollout.group_size=1", "algo.name=reinforce_pp"],
            "rollout.group_size=1 never does",
        ),
        (
            ["filters.dynamic_sampling=true", "env.num_train_tasks=1"],
            "env.num_train_tasks=1: the batch could never fill",
        ),
        (["filters.overlong_buffer=1000"], "filters.overlong_buffer=1000 exceeds"),
        (["filters.overlong_buffer=-1"], "filters.overlong_buffer must be >= 0"),
        (["filters.variance_filter_keep=0"], "filters.variance_filter_keep must be in"),
        (["filters.roc=true", "rollout.group_size=3"], "must be >= 2 x roc_min_per_class"),
        (["filters.roc_oversample=4"], "filters.roc_oversample is set but does nothing"),
        (["filters.ttrl_vote_samples=4"], "filters.ttrl_vote_samples=4 must be >= 2 and >="),
        (
            ["filters.ttrl_vote_samples=16", "filters.roc=true"],
            "filters.ttrl_vote_samples and filters.roc",
        ),
        ([*STEP, "filters.overlong_filter=true"], "filters.overlong_filter judges a whole"),
        ([*STEP, "filters.ttrl_vote_samples=16"], "votes on final answers"),
        (["algo.trr_type_field=template"], "algo.trr_type_field is set but does nothing"),
        (["algo.name=trr_pp", "algo.trr_type_field="], "algo.trr_type_field must name"),
        (["dpo.beta=0"], "dpo.beta must be > 0"),
        (
            ["env.name=gridworld", "env.topk=2"],
            "env.topk does nothing: env.name=gridworld has no search tool",
        ),
    ],
)
def test_invalid_algorithm_combinations_fail_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        GSPO,
        [*GSPO, "algo.gspo_clip_low=1e-3", "algo.name=rloo"],
        ["algo.dual_clip=3"],
        [*STEP, "rollout.history_window=0"],
        ["filters.dynamic_sampling=true", "filters.max_gen_batches=3"],
        ["filters.overlong_filter=true", "filters.overlong_buffer=100"],
        ["filters.variance_filter_keep=0.25"],
        ["filters.roc=true", "filters.roc_oversample=3"],
        ["filters.ttrl_vote_samples=16"],
        ["algo.name=trr_pp", "algo.trr_type_field=template", "algo.trr_role_field="],
        ["dpo.beta=0.2", "dpo.lr=1e-5"],
    ],
)
def test_valid_algorithm_settings_load(overrides):
    load_config(None, overrides)


def test_new_recipes_load_with_their_mechanisms():
    dapo = load_config("dapo_math")
    assert dapo.filters.dynamic_sampling and dapo.filters.max_gen_batches == 10
    assert (dapo.algo.clip_low, dapo.algo.clip_high, dapo.algo.loss_agg) == (
        0.2,
        0.28,
        "token-mean",
    )
    assert dapo.filters.overlong_buffer > 0 and dapo.algo.kl_coef == 0
    gigpo = load_config("gigpo_gridworld")
    assert (gigpo.algo.name, gigpo.rollout.mode, gigpo.rollout.history_window) == (
        "gigpo",
        "step",
        2,
    )
    assert (gigpo.gigpo.omega, gigpo.gigpo.gamma) == (1.0, 0.95)
    # the GRPO baseline is the same recipe with one override
    assert load_config("gigpo_gridworld", ["algo.name=grpo"]).rollout.mode == "step"


def test_loss_agg_defaults_to_the_estimators_own():
    # calculator_grpo leaves algo.loss_agg unset: Dr. GRPO gets its constant normaliser (sum
    # over tokens / (rollout.max_total_tokens x sequences)), the others GRPO's sequence mean
    assert load_config("calculator_grpo").algo.loss_agg == "seq-mean-token-mean"
    dr_grpo = load_config("calculator_grpo", ["algo.name=dr_grpo"])
    assert dr_grpo.algo.loss_agg == "seq-mean-token-sum-norm"
    # an override that sets it wins for estimators without one of their own; Dr. GRPO's own
    # wins over the recipe's, and a conflicting override fails (test_config_precedence.py)
    explicit = ["algo.name=rloo", "algo.loss_agg=token-mean"]
    assert load_config("calculator_grpo", explicit).algo.loss_agg == "token-mean"
    assert load_config(None, ["algo.name=dr_grpo"]).algo.loss_agg == "seq-mean-token-sum-norm"


def test_defaults_keep_the_existing_behaviour():
    cfg = load_config()
    assert cfg.rollout.mode == "episode" and cfg.algo.policy_loss == "ppo"
    assert not cfg.filters.dynamic_sampling and cfg.filters.variance_filter_keep == 1.0
    assert not cfg.filters.roc and cfg.filters.ttrl_vote_samples == 0
    assert cfg.filters.overlong_buffer == 0 and not cfg.filters.overlong_filter
    assert cfg.filters.metric == "outcome"


def test_scientific_notation_without_a_dot_is_a_float():
    # YAML 1.1 reads 1e-5 as a string; float fields accept it, other types still refuse it.
    assert load_config(None, ["optim.lr=1e-5"]).optim.lr == pytest.approx(1e-5)
    with pytest.raises(ConfigError, match="trainer.steps: expected an integer"):
        load_config(None, ["trainer.steps=1e3"])
    with pytest.raises(ConfigError, match="optim.lr: expected a number"):
        load_config(None, ["optim.lr=fast"])

"""The config of CISPO, Clip-Cov, KL-Cov, GMPO, IcePop and on-policy distillation: every knob is
refused where it cannot act, out-of-range values name their key, and the valid ones load."""

import pytest

from agentic_rl.algos.losses import POLICY_LOSSES
from agentic_rl.config.algo import SEQUENCE_LOSSES, rollout_correction, rollout_correction_low
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError

RESET = ["algo.clip_high=0.2"]  # the default recipe sets clip_high 0.28 (a ppo/clip_cov knob)
CISPO = ["algo.policy_loss=cispo", *RESET]
GMPO = ["algo.policy_loss=gmpo", *RESET]
ONE_STEP = ["algo.ppo_mini_batches=1"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo.policy_loss=cispo"], "algo.clip_high is set but does nothing: .*cispo does not"),
        (["algo.cispo_clip_high=0.3"], "algo.cispo_clip_high is set but does nothing"),
        (["algo.clip_cov_ratio=0.01"], "algo.clip_cov_ratio is set but does nothing.*clip_cov"),
        (["algo.kl_cov_coef=2"], "algo.kl_cov_coef is set but does nothing"),
        (["algo.gmpo_clip_low=0.2"], "algo.gmpo_clip_low is set but does nothing"),
        ([*CISPO, "algo.gspo_clip_low=1e-3"], "algo.gspo_clip_low is set but does nothing"),
        ([*CISPO, "algo.cispo_clip_high=-0.1"], "algo.cispo_clip_low and algo.cispo_clip_high"),
        ([*CISPO, "algo.dual_clip=3"], "algo.dual_clip applies to the token-level ppo loss"),
        (["algo.policy_loss=turn", "algo.dual_clip=3"], "algo.dual_clip applies to the token"),
        (
            ["algo.policy_loss=turn", "rollout.max_staleness=1"],
            "algo.policy_loss=turn is not the token-level ppo loss",
        ),
        (["algo.policy_loss=clip_cov", "algo.clip_cov_ratio=0"], r"algo.clip_cov_ratio must be"),
        (
            ["algo.policy_loss=clip_cov", "algo.clip_cov_low=5", "algo.clip_cov_high=1"],
            "algo.clip_cov_low .* must be below algo.clip_cov_high",
        ),
        (["algo.policy_loss=kl_cov", *RESET, "algo.kl_cov_ratio=2"], "algo.kl_cov_ratio must be"),
        (["algo.policy_loss=kl_cov", *RESET, "algo.kl_cov_coef=0"], "algo.kl_cov_coef must be > 0"),
        (["algo.policy_loss=kl_cov", *RESET, *ONE_STEP], "kl_cov acts only through the ratio"),
        ([*GMPO, "algo.loss_agg=token-mean"], "algo.loss_agg must be seq-mean-token-mean"),
        ([*GMPO, "algo.name=reinforce_pp"], "needs one advantage per sequence"),
        ([*GMPO, "algo.gmpo_clip_high=0"], "algo.gmpo_clip_low and algo.gmpo_clip_high must be"),
        ([*GMPO, *ONE_STEP, "algo.gmpo_clip_low=0.2"], "algo.gmpo_clip_low is set but does"),
        ([*CISPO, *ONE_STEP, "algo.cispo_clip_high=0.3"], "algo.cispo_clip_high is set but"),
        (
            [*GMPO, "algo.rollout_correction=icepop"],
            "algo.rollout_correction=icepop weighs tokens one by one; algo.policy_loss=gmpo",
        ),
        (["algo.rollout_correction_low=0.3"], "algo.rollout_correction_low is set but does"),
        (
            ["algo.rollout_correction=tis", "algo.rollout_correction_low=0.3"],
            "algo.rollout_correction_low is set but does nothing: the rollout correction is tis",
        ),
        (
            ["algo.rollout_correction=icepop", "algo.rollout_correction_low=1.5"],
            r"algo.rollout_correction_low must be in \(0, 1\]",
        ),
        (["distill.coef=0.5"], "distill.coef is set but does nothing: distill.teacher is empty"),
    ],
)
def test_invalid_or_inert_settings_fail_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_distill_refusals(tmp_path):
    teacher = [f"distill.teacher={tmp_path}"]
    with pytest.raises(ConfigError, match="distill.coef must be > 0"):
        load_config(None, [*teacher, "distill.coef=0"])
    with pytest.raises(ConfigError, match="algo.policy_loss=gmpo averages them"):
        load_config(None, [*teacher, *GMPO])
    with pytest.raises(ConfigError, match="distill.task_reward=false ignores the task reward"):
        load_config(None, [*teacher, "distill.task_reward=false", "algo.name=ppo"])
    cfg = load_config(None, [*teacher, "distill.task_reward=false", "distill.coef=0.5"])
    assert cfg.distill.teacher == str(tmp_path) and cfg.distill.coef == 0.5


@pytest.mark.parametrize(
    "overrides",
    [
        CISPO,
        [*CISPO, "algo.cispo_clip_low=10", "algo.cispo_clip_high=0.3", "algo.loss_agg=token-mean"],
        ["algo.policy_loss=clip_cov", "algo.clip_cov_ratio=0.01", "algo.clip_cov_low=0.5"],
        ["algo.policy_loss=clip_cov", *ONE_STEP, *RESET, "algo.clip_cov_ratio=0.01"],
        ["algo.policy_loss=kl_cov", *RESET, "algo.kl_cov_ratio=0.002", "algo.kl_cov_coef=0.5"],
        [*GMPO, "algo.gmpo_clip_low=0.3", "algo.gmpo_clip_high=0.5"],
        ["algo.policy_loss=turn", "algo.clip_high=0.28", "algo.dual_clip=0"],
        ["algo.policy_loss=turn", "--recipe=mt_grpo_gridworld"],
        ["algo.policy_loss=turn", "--recipe=mt_grpo_gridworld", "algo.name=turn_ppo"],
    ],
)
def test_valid_settings_load(overrides):
    recipe = [o.split("=")[1] for o in overrides if o.startswith("--recipe=")]
    rest = [o for o in overrides if not o.startswith("--recipe=")]
    cfg = load_config(recipe[0] if recipe else None, rest)
    assert cfg.algo.policy_loss == overrides[0].split("=")[1]


def test_icepop_band_and_auto_for_sequence_losses():
    cfg = load_config(None, ["algo.rollout_correction=icepop"])
    assert rollout_correction(cfg) == ("icepop", 5.0) and rollout_correction_low(cfg) == 0.5
    overrides = ["algo.rollout_correction=icepop", "algo.rollout_correction_low=0.8"]
    cfg = load_config(None, [*overrides, "algo.rollout_correction_cap=2"])
    assert rollout_correction(cfg) == ("icepop", 2.0) and rollout_correction_low(cfg) == 0.8
    assert rollout_correction_low(load_config(None, ["algo.rollout_correction=tis"])) is None
    # "auto" corrects GMPO, like GSPO, per sequence
    cfg = load_config(None, [*GMPO, "rollout.top_p=0.9"])
    assert rollout_correction(cfg) == ("mis_seq_geo", 1.01)


def test_sequence_losses_list_matches_the_table():
    assert set(SEQUENCE_LOSSES) == {n for n, s in POLICY_LOSSES.items() if s.sequence_level}

"""Validation of how an update uses its rollout batch: the PPO mini-batches and epochs, pi_old
(`algo.recompute_old_logprobs`) and the rollout/training-mismatch correction
(`algo.rollout_correction`). Called by `validate.validate`.

The rule that matters most: with one mini-batch, one epoch and pi_old recomputed, the update is
one on-policy step whose ratio pi / pi_old is exactly 1, so no clip setting can act; changing
one then fails here instead of being silently ignored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentic_rl.algos.losses import POLICY_LOSSES
from agentic_rl.config.algo import (
    CORRECTION_LOWS,
    ROLLOUT_CORRECTIONS,
    generator_differs,
    rollout_correction,
    rollout_correction_low,
)
from agentic_rl.config.checks import _check_choice, _unused
from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

CLIP_KEYS = tuple(
    dict.fromkeys(f"algo.{field}" for spec in POLICY_LOSSES.values() for field in spec.ratio_knobs)
)
"""The knobs of every policy loss that act only through the ratio pi / pi_old."""
SEQUENCE_CORRECTIONS = ("auto", "none", "mis_seq_geo")  # what a sequence-level loss can take


def validate_update(cfg: Config) -> None:
    """Reject mini-batch, pi_old and rollout-correction settings that are invalid or inert."""
    algo, rollout = cfg.algo, cfg.rollout
    _check_choice("algo.rollout_correction", algo.rollout_correction, ROLLOUT_CORRECTIONS)
    if algo.ppo_mini_batches < 1:
        raise ConfigError(f"algo.ppo_mini_batches must be >= 1, got {algo.ppo_mini_batches}")
    cap = algo.rollout_correction_cap
    if cap != 0 and cap < 1:
        raise ConfigError(
            f"algo.rollout_correction_cap must be >= 1 (the band is [1/C, C]) or 0 (the mode's "
            f"default), got {cap}"
        )
    low = algo.rollout_correction_low
    if low != 0 and not 0 < low <= 1:
        raise ConfigError(
            f"algo.rollout_correction_low must be in (0, 1] (or 0, the mode's default), got {low}"
        )
    if algo.ppo_mini_batches == 1 and algo.epochs == 1 and algo.recompute_old_logprobs:
        if POLICY_LOSSES[algo.policy_loss].needs_ratio:
            raise ConfigError(
                f"algo.policy_loss={algo.policy_loss} acts only through the ratio pi / pi_old, "
                "which is exactly 1 in one on-policy step (algo.ppo_mini_batches=1, "
                "algo.epochs=1): it would be the plain policy gradient. Split the rollout batch "
                "into PPO mini-batches (algo.ppo_mini_batches > 1) or run more epochs"
            )
        _unused(
            cfg,
            list(CLIP_KEYS),
            "with algo.ppo_mini_batches=1 and algo.epochs=1 the update is one on-policy step, "
            "its ratio pi / pi_old is exactly 1 and no clip binds: split the rollout batch into "
            "PPO mini-batches (algo.ppo_mini_batches > 1) or run more epochs",
        )
    if rollout.train_on_observations and (
        algo.ppo_mini_batches > 1 or not algo.recompute_old_logprobs
    ):
        raise ConfigError(
            "rollout.train_on_observations needs algo.ppo_mini_batches=1 and "
            "algo.recompute_old_logprobs=true: observation tokens have no behaviour logprobs to "
            "be pi_old or to form a ratio with"
        )
    differs = generator_differs(cfg)
    if algo.kl_in_reward and not algo.recompute_old_logprobs and differs:
        raise ConfigError(
            "algo.kl_in_reward takes the KL against pi_old, which with "
            "algo.recompute_old_logprobs=false is the generator's behaviour logprobs, of another "
            f"distribution here ({'; '.join(differs)}): every token would be charged that "
            "mismatch as KL. Set algo.recompute_old_logprobs=true (pi_old is then recomputed "
            "before the advantages)"
        )
    explicit = algo.rollout_correction not in ("auto", "none")
    if rollout.max_staleness > 0:
        if explicit and algo.rollout_correction != "tis":
            raise ConfigError(
                f"algo.rollout_correction={algo.rollout_correction} with rollout.max_staleness > 0:"
                " asynchronous rollouts correct every token with decoupled PPO's truncated weight"
                " min(pi_prox / pi_behav, algo.stale_is_cap) (tis); use auto or tis"
            )
        _unused(
            cfg,
            ["algo.rollout_correction_cap", "algo.rollout_correction_low"],
            "stale tokens are capped by algo.stale_is_cap",
        )
        return
    if explicit and not algo.recompute_old_logprobs:
        raise ConfigError(
            f"algo.rollout_correction={algo.rollout_correction} needs "
            "algo.recompute_old_logprobs=true: with pi_old = the behaviour logprobs the weight "
            "pi_old / pi_behav is always 1"
        )
    if explicit and rollout.train_on_observations:
        raise ConfigError(
            "algo.rollout_correction weighs tokens by their behaviour logprobs, which observation "
            "tokens do not have: rollout.train_on_observations must be false"
        )
    sequence_level = POLICY_LOSSES[algo.policy_loss].sequence_level
    if sequence_level and algo.rollout_correction not in SEQUENCE_CORRECTIONS:
        raise ConfigError(
            f"algo.rollout_correction={algo.rollout_correction} weighs tokens one by one; "
            f"algo.policy_loss={algo.policy_loss} has one ratio per sequence: use mis_seq_geo, "
            "auto or none"
        )
    mode = rollout_correction(cfg)[0]
    if mode == "none":
        _unused(cfg, ["algo.rollout_correction_cap"], "no rollout correction is applied")
    if rollout_correction_low(cfg) is None:
        _unused(
            cfg,
            ["algo.rollout_correction_low"],
            f"the rollout correction is {mode}; only {', '.join(CORRECTION_LOWS)} has a lower "
            "bound of its own",
        )

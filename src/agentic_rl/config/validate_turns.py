"""Validation of the turn-level estimators (`algo.name=mt_grpo`, `turn_ppo`; algos/turns.py):
the rollout they need, the settings they cannot act with, and MT-GRPO's turn coefficient.
Called by `validate.validate`."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.config.checks import _unused
from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

MT_GRPO_OUTCOMES = ("episode", "last_turn")
"""`algo.mt_grpo_outcome`: the reward MT-GRPO's outcome advantage normalises."""


def _names(flag: str) -> str:
    """The estimators with a flag, for messages."""
    return ", ".join(name for name, e in ADVANTAGE_ESTIMATORS.items() if getattr(e, flag))


def validate_turns(cfg: Config, explicit: Collection[str] = ()) -> None:
    """A turn-level estimator credits the turns of an episode by their index, in one row or cut
    over several (steps, conversations, context segments; in a multi-agent episode each role's
    turns by their index among that role's); its turns must be the model's own tokens
    (observations belong to no turn); MT-GRPO's turn term needs a turn before the last.
    algo.turn_advantage_coef with another estimator does nothing."""
    algo, rollout = cfg.algo, cfg.rollout
    estimator = ADVANTAGE_ESTIMATORS[algo.name]
    if algo.mt_grpo_outcome not in MT_GRPO_OUTCOMES:
        raise ConfigError(
            f"algo.mt_grpo_outcome must be one of {', '.join(MT_GRPO_OUTCOMES)}, "
            f"got {algo.mt_grpo_outcome!r}"
        )
    if not estimator.turn_groups:
        _unused(
            cfg,
            ["algo.turn_advantage_coef", "algo.mt_grpo_outcome"],
            f"algo.name={algo.name} adds no turn advantage ({_names('turn_groups')} does)",
            explicit,
        )
    elif not (math.isfinite(algo.turn_advantage_coef) and algo.turn_advantage_coef >= 0):
        raise ConfigError(
            f"algo.turn_advantage_coef must be a number >= 0, got {algo.turn_advantage_coef}"
        )
    elif rollout.max_turns < 2:
        raise ConfigError(
            f"algo.name={algo.name} adds the step reward of every turn before the last to its "
            "advantage; rollout.max_turns=1 leaves no such turn (it would be GRPO): set "
            "rollout.max_turns >= 2 or algo.name=grpo"
        )
    if not estimator.turn_level:
        return
    if rollout.train_on_observations:
        raise ConfigError(
            f"rollout.train_on_observations trains observation tokens, which belong to no turn: "
            f"algo.name={algo.name} would give them no turn credit; use another estimator"
        )

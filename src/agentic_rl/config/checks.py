"""Generic checks shared by the config validators (validate.py,
validate_engines.py, validate_scale.py): a value among allowed choices, values in range, and settings
changed from their defaults that the chosen setup would silently ignore. Keys are dotted
`section.field` names."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}: '{value}' is not one of {', '.join(choices)}")


def _get(cfg: Config, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def _check_positive(cfg: Config, keys: list[str], allow_zero: bool = False) -> None:
    for key in keys:
        value = _get(cfg, key)
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{key} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def _default(cfg: Config, key: str) -> Any:
    section, name = key.split(".")
    return getattr(type(getattr(cfg, section))(), name)


def _unused(cfg: Config, keys: list[str], reason: str, explicit: Collection[str] = ()) -> None:
    """Keys the chosen setup would silently ignore that are set: changed from their defaults,
    or named in `explicit` (the keys the recipe or the command line set, even to the default
    value, config/load.py)."""
    for key in keys:
        if key in explicit or _get(cfg, key) != _default(cfg, key):
            raise ConfigError(f"{key} is set but does nothing: {reason}")


def check_trainer(cfg: Config, explicit: Collection[str] = ()) -> None:
    """trainer.resume is true, false or "force"; trainer.eval_untrained acts only with
    trainer.eval_before; trainer.save_batches needs a run whose steps replay in one process
    (`agentic-rl replay`): sampled groups, synchronous rollouts, one learner process."""
    if not cfg.trainer.eval_before:
        _unused(cfg, ["trainer.eval_untrained"], "trainer.eval_before=false", explicit)
    resume = cfg.trainer.resume
    if isinstance(resume, str) and resume != "force":
        raise ConfigError(f"trainer.resume: {resume!r} is not true, false or force")
    if cfg.trainer.save_batches:
        if cfg.rollout.scheme != "sample":
            raise ConfigError(
                f"trainer.save_batches needs rollout.scheme=sample (got {cfg.rollout.scheme}): "
                "self-play steps are not replayable"
            )
        if cfg.rollout.max_staleness > 0 or cfg.learner.strategy != "single":
            raise ConfigError(
                "trainer.save_batches needs rollout.max_staleness=0 and learner.strategy=single: "
                "a replayed step reruns the update in one process on the weights of the step "
                "before, which asynchronous rollouts and sharded learners do not sample from"
            )


RESUMABLE_KEYS = (
    "description",
    "stages",
    "rollout.eval_batch_size",
    *(
        f"trainer.{name}"
        for name in (
            "steps",
            "max_minutes",
            "eval_every",
            "eval_before",
            "eval_untrained",
            "save_every",
            "keep_last",
            "resume",
            "progress",
            "tensorboard",
            "wandb",
            "wandb_project",
            "log_trajectories",
            "save_batches",
            "export_model",
            "device",
        )
    ),
)
"""Settings a resumed run may change: how long it runs, what it logs and saves, where the
learner runs. Anything else would continue one experiment with another's settings."""


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, Any] = {}
    for key, value in data.items():
        out.update(_flatten(value, f"{prefix}{key}." if isinstance(value, dict) else prefix + key))
    return out


def config_differences(
    saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any] | None = None
) -> list[str]:
    """The dotted keys (with old -> new values) where two `Config.to_dict()`s differ, leaving
    out `RESUMABLE_KEYS`. A key the saved config lacks (written before the setting existed)
    reads as its value in `defaults`."""
    old, new = {**_flatten(defaults or {}), **_flatten(saved)}, _flatten(current)
    keys = sorted(set(old) | set(new))
    return [
        f"{key} ({old.get(key, '<unset>')!r} -> {new.get(key, '<unset>')!r})"
        for key in keys
        if old.get(key) != new.get(key) and key not in RESUMABLE_KEYS
    ]


def check_out_dir(out_dir: str) -> None:
    """trainer.out_dir must be a directory this process can create files in (or one it can
    create): checked before anything is built, so a typo fails in a second, not after the
    model loaded."""
    path = Path(out_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"trainer.out_dir={out_dir}: exists and is not a directory")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"trainer.out_dir={out_dir}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == path else f"cannot be created in {existing}"
        raise ConfigError(f"trainer.out_dir={out_dir}: {what}")

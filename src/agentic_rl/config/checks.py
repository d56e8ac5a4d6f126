"""Generic checks shared by the config validators (validate.py,
validate_engines.py, validate_scale.py): a value among allowed choices, values in range, and settings
changed from their defaults that the chosen setup would silently ignore. Keys are dotted
`section.field` names."""

from __future__ import annotations

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


def _unused(cfg: Config, keys: list[str], reason: str) -> None:
    """Keys changed from their defaults that the chosen setup would silently ignore."""
    for key in keys:
        if _get(cfg, key) != _default(cfg, key):
            raise ConfigError(f"{key} is set but does nothing: {reason}")

"""Generic machinery behind `agentic_rl.config.load`: typed YAML -> dataclass building, dotted
overrides and recipe lookup. Nothing here knows the project's config sections."""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.errors import UserInputError

_SCIENTIFIC = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")


class ConfigError(UserInputError, ValueError):
    """A recipe or override is invalid; the message names the key."""


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and mildly coerce, int -> float) a YAML value against a field's annotation."""
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return build_dataclass(tp, value, key + ".")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} is not a valid {tp}")
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        # YAML 1.1 reads "1e-5" (no dot) as a string; accept it for float fields.
        if isinstance(value, str) and _SCIENTIFIC.match(value.strip()):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if value is False:  # YAML 1.1 reads a bare `no` / `off` as false: `mixed_precision=no`
            return "no"
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def build_dataclass(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = _field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}' (valid keys here: {', '.join(names)})"
        )
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{dotted}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`algo.clip_high=0.28` -> ("algo.clip_high", 0.28); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{text}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override '{text}': cannot parse value: {err}") from err
    return key, value


def recipe_dirs() -> list[Path]:
    """Where recipe names are looked up: $AGENTIC_RL_RECIPES, ./recipes, the project's recipes/."""
    dirs = []
    if os.environ.get("AGENTIC_RL_RECIPES"):
        dirs.append(Path(os.environ["AGENTIC_RL_RECIPES"]))
    dirs.append(Path.cwd() / "recipes")
    dirs.append(Path(__file__).resolve().parents[3] / "recipes")  # src/agentic_rl/config/
    return dirs


DEFAULT_RECIPE = "search_qa_grpo"


def resolve_recipe(name_or_path: str | None) -> Path:
    """A recipe file path, or a recipe name looked up in `recipe_dirs()`."""
    name = name_or_path or DEFAULT_RECIPE
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"recipe file not found: {path}")
        return path
    for folder in recipe_dirs():
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for d in recipe_dirs() if d.is_dir() for p in d.glob("*.yaml")})
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    others = f" (or {', '.join(close[1:])})" if len(close) > 1 else ""
    hint = f"did you mean {close[0]!r}{others}? " if close else ""
    raise ConfigError(
        f"unknown recipe '{name}': {hint}(known: {', '.join(known) or 'none found'}; "
        "`agentic-rl recipes` lists them)"
    )

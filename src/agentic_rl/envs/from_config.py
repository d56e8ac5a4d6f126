"""Envs and tasks from a `Config`: the trainer's only door into `agentic_rl.envs`.

The settings every env understands come from named `env.*` fields (format_penalty,
tool_timeout_s, topk, seed) and are passed only to envs whose constructor takes them; anything
env-specific comes from `env.options`. Envs whose constructor takes `progress` (a float in [0, 1],
the fraction of training done) get it, which is how curricula (ZeroSearch's noise schedule)
follow the run without a callback.

Tasks come from the env's task generator, or from the user's own files (`env.train_file`,
`env.eval_file`: Search-R1 / veRL rows, envs/task_files.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from agentic_rl.config.parse import ConfigError
from agentic_rl.config.schema import Config
from agentic_rl.envs.base import Env
from agentic_rl.envs.registry import (
    env_parameters,
    make_env,
    split_options,
    task_fields,
    task_generator,
    task_parameters,
)
from agentic_rl.envs.task_files import DatasetError, load_tasks
from agentic_rl.errors import UserInputError
from agentic_rl.types import Task

T = TypeVar("T")


def env_kwargs(cfg: Config, progress: float | None = None) -> dict[str, Any]:
    """Constructor kwargs of the configured env (`progress` only where the env takes it)."""
    accepted = env_parameters(cfg.env.name)
    common = {
        "format_penalty": cfg.env.format_penalty,
        "tool_timeout_s": cfg.env.tool_timeout_s,
        "topk": cfg.env.topk,
        "corpus_seed": cfg.env.seed,
        "progress": progress,
    }
    kwargs = {k: v for k, v in common.items() if k in accepted and v is not None}
    kwargs.update(split_options(cfg.env.name, cfg.env.options)[0])
    return kwargs


def make_envs(cfg: Config, n: int, progress: float | None = None, pool: Any = None) -> list[Env]:
    """`n` fresh envs (one per episode of a batch); from `pool` (envs on Ray actors,
    ray_pool.EnvPool) when given."""
    if pool is not None:
        return pool.make(n, progress)
    kwargs = env_kwargs(cfg, progress)
    return [_user_setting(cfg, lambda: make_env(cfg.env.name, **kwargs)) for _ in range(n)]


def _user_setting(cfg: Config, make: Callable[[], T]) -> T:
    """`make()`, where a ValueError means a value the user set (an env option, an env id...):
    the env constructors and task generators check their arguments with ValueError, and at
    this door those arguments are the user's `env.*` settings, so the error becomes a
    ConfigError naming them. A `UserInputError` (a level file, a Gymnasium env) passes as it
    is: it already names its file or id."""
    try:
        return make()
    except UserInputError:
        raise
    except ValueError as err:
        raise ConfigError(
            f"env.name={cfg.env.name} with env.options {cfg.env.options}: {err}"
        ) from err


def task_file(cfg: Config, split: str) -> tuple[str, str]:
    """(config key, path) of the user's task file for `split`; path "" = generated tasks."""
    key = "env.train_file" if split == "train" else "env.eval_file"
    return key, cfg.env.train_file if split == "train" else cfg.env.eval_file


def make_tasks(cfg: Config, split: str) -> list[Task]:
    """The configured number of `split` ("train" or "eval") tasks: the first rows of the user's
    task file for that split where one is set, else generated from env.seed."""
    n = cfg.env.num_train_tasks if split == "train" else cfg.env.num_eval_tasks
    key, path = task_file(cfg, split)
    if path:
        try:
            return load_tasks(path, limit=n, required=task_fields(cfg.env.name), env=cfg.env.name)
        except (DatasetError, OSError, ImportError) as err:
            raise ConfigError(f"{key}: {err}") from err
    kwargs: dict[str, Any] = {}
    if "corpus_seed" in task_parameters(cfg.env.name):
        kwargs["corpus_seed"] = cfg.env.seed
    kwargs.update(split_options(cfg.env.name, cfg.env.options)[1])
    generate = task_generator(cfg.env.name)
    return _user_setting(cfg, lambda: generate(split, n, cfg.env.seed, **kwargs))

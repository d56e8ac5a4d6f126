"""The env section's load-time rules: `env.name` names a registered env, `env.options` are
parameters it takes, `env.train_file` / `env.eval_file` exist and fit, the scripted expert that
a warm start or UI-TARS's failure pairs need exists, and `env.reward_fn` loads and applies to
the chosen rollout. Called by `validate.py`; the registry is imported inside the functions
(envs pull in heavy optional packages).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agentic_rl.config.checks import _check_choice, _default, _unused
from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config


def _env_names() -> tuple[str, ...]:
    """The live env registry's names (built-in, registered, installed plugins)."""
    from agentic_rl.envs.registry import env_names  # heavy imports: only here

    return tuple(env_names())


def validate_env(cfg: Config) -> None:
    """The env section: a known env, options it takes, data files, an expert where a warm
    start or failure pairs need one, and a loadable reward function."""
    _check_choice("env.name", cfg.env.name, _env_names())
    from agentic_rl.envs.registry import env_parameters, split_options  # heavy: only here

    if cfg.env.topk != _default(cfg, "env.topk") and "topk" not in env_parameters(cfg.env.name):
        raise ConfigError(f"env.topk does nothing: env.name={cfg.env.name} has no search tool")
    try:
        split_options(cfg.env.name, cfg.env.options)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    from agentic_rl.envs.search.schemes import SCHEMES

    scheme = SCHEMES.get(str(cfg.env.options.get("reward")))
    if scheme is not None and scheme.score is not None and cfg.rollout.chat_format != "tags":
        raise ConfigError(
            f"env.options.reward={scheme.name} scores <think>/<search>/<answer> tags: it needs "
            f"rollout.chat_format=tags, got {cfg.rollout.chat_format}"
        )
    _validate_env_sources(cfg)
    _validate_reward_fn(cfg)
    _validate_task_selection(cfg)


def _validate_task_selection(cfg: Config) -> None:
    """env.select_by_variance (1-shot RLVR's choice of example, train/task_select.py): more
    candidates than the tasks it keeps, at least two samples each, sampled training rollouts."""
    env = cfg.env
    if env.select_by_variance < 0:
        raise ConfigError(f"env.select_by_variance must be >= 0, got {env.select_by_variance}")
    if not env.select_by_variance:
        _unused(cfg, ["env.select_samples"], "env.select_by_variance=0 (no task selection)")
        return
    if env.select_by_variance <= env.num_train_tasks:
        raise ConfigError(
            f"env.select_by_variance={env.select_by_variance} candidates cannot choose "
            f"env.num_train_tasks={env.num_train_tasks} training tasks: it keeps the "
            "num_train_tasks candidates whose rewards vary most, so it needs more candidates "
            "than that (1-shot RLVR: env.num_train_tasks=1)"
        )
    if env.select_samples < 2:
        raise ConfigError(
            f"env.select_samples must be >= 2 with env.select_by_variance, got "
            f"{env.select_samples}: the rewards of one sample cannot vary"
        )
    if cfg.rollout.scheme != "sample":
        raise ConfigError(
            f"env.select_by_variance chooses the training tasks of sampled rollouts; "
            f"rollout.scheme={cfg.rollout.scheme} makes its own tasks"
        )


def _validate_env_sources(cfg: Config) -> None:
    """env.train_file / env.eval_file, and the scripted expert a warm start needs."""
    from agentic_rl.envs.base import has_expert, has_expert_mistake
    from agentic_rl.envs.registry import env_class, env_parameters, task_parameters

    env = cfg.env
    for key, path in (("env.train_file", env.train_file), ("env.eval_file", env.eval_file)):
        if not path:
            continue
        if not Path(path).is_file():
            raise ConfigError(f"{key}: file {path} not found")
        if Path(path).suffix.lower() not in (".jsonl", ".json", ".parquet"):
            raise ConfigError(f"{key}: {path} is not a .jsonl, .json or .parquet file")
    if env.train_file and not env.eval_file:
        raise ConfigError(
            "env.train_file is set but env.eval_file is not: evaluating on generated tasks "
            "would measure another task; set env.eval_file to held-out rows (or the same file)"
        )
    if env.train_file and env.eval_file:
        task_only = sorted(set(env.options) & task_parameters(env.name) - env_parameters(env.name))
        if task_only:
            raise ConfigError(
                f"env.options.{task_only[0]} is set but does nothing: it only shapes generated "
                "tasks, and env.train_file / env.eval_file replace them"
            )
    if cfg.dpo.failure_tasks and not has_expert(env_class(env.name)):
        raise ConfigError(
            f"dpo.failure_tasks: the corrected actions come from the env's scripted expert, and "
            f"env.name={env.name} has none (no expert_turn): set dpo.failure_tasks=0"
        )
    if cfg.warm_start.num_tasks:
        cls = env_class(env.name)
        if not has_expert(cls):
            raise ConfigError(
                f"warm_start.num_tasks: the warm start plays the env's scripted expert, and "
                f"env.name={env.name} has none (no expert_turn): set warm_start.num_tasks=0"
            )
        if cfg.warm_start.recovery_fraction and not has_expert_mistake(cls):
            raise ConfigError(
                f"warm_start.recovery_fraction: env.name={env.name}'s scripted expert has no "
                "mistake to recover from (no expert_mistake): set warm_start.recovery_fraction=0"
            )
        reads_rows = getattr(cls, "expert_reads_task_files", False)
        if env.train_file and cls.__module__.startswith("agentic_rl.") and not reads_rows:
            raise ConfigError(
                f"warm_start.num_tasks: env.name={env.name}'s scripted expert needs the fields "
                "of its generated tasks, which env.train_file rows lack: set "
                "warm_start.num_tasks=0 (or warm-start with `agentic-rl sft`)"
            )


def _validate_reward_fn(cfg: Config) -> None:
    """env.reward_fn imports and is callable; it works where episodes have one outcome."""
    from agentic_rl.rewards.custom import REWARD_MODES, RewardFnError, load_reward_fn

    env = cfg.env
    _check_choice("env.reward_mode", env.reward_mode, REWARD_MODES)
    if not env.reward_fn:
        _unused(cfg, ["env.reward_mode"], "env.reward_fn is not set")
        return
    try:
        load_reward_fn(env.reward_fn)
    except RewardFnError as err:
        raise ConfigError(f"env.reward_fn: {err}") from err
    for conflict, value in (
        ("rollout.mode=step", cfg.rollout.mode == "step"),
        ("rollout.mode=memory", cfg.rollout.mode == "memory"),
        ("rollout.context_budget", cfg.rollout.context_budget > 0),
        ("rollout.scheme=self_play", cfg.rollout.scheme == "self_play"),
        ("filters.ttrl_vote_samples (TTRL relabels every reward)", cfg.filters.ttrl_vote_samples),
    ):
        if value:
            raise ConfigError(
                f"env.reward_fn scores whole episodes in rollout.mode=episode; it is not "
                f"supported with {conflict}"
            )

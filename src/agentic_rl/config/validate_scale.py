"""Validation of the scale-out settings: asynchronous rollouts (`rollout.max_staleness`,
`algo.stale_is_cap`) and the `ray` section. Called by `validate.validate`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentic_rl.config.parse import ConfigError

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

RAY_KEYS = (
    "address",
    "num_cpus",
    "num_env_workers",
    "env_worker_cpus",
    "max_episode_retries",
    "call_timeout_s",
    "generator_actor",
    "generator_cpus",
    "generator_gpus",
)


def _changed(cfg: Config, section: str, key: str) -> bool:
    obj = getattr(cfg, section)
    return getattr(obj, key) != getattr(type(obj)(), key)


def validate_distributed(cfg: Config) -> None:
    """Reject async / Ray settings that are out of range or would silently do nothing."""
    _validate_async(cfg)
    _validate_ray(cfg)


def _validate_async(cfg: Config) -> None:
    k = cfg.rollout.max_staleness
    if k < 0:
        raise ConfigError(f"rollout.max_staleness must be >= 0 (0 = synchronous), got {k}")
    if k == 0:
        if _changed(cfg, "algo", "stale_is_cap"):
            raise ConfigError(
                "algo.stale_is_cap is set but does nothing: rollout.max_staleness=0 "
                "(synchronous rollouts have no stale tokens to correct)"
            )
        return
    if cfg.algo.stale_is_cap < 1:
        raise ConfigError(
            f"algo.stale_is_cap must be >= 1 (a cap below 1 would shrink every token's weight), "
            f"got {cfg.algo.stale_is_cap}"
        )
    problem = stale_correction_problem(cfg)
    if problem is not None:
        raise ConfigError(f"rollout.max_staleness > 0 {problem}")
    backend = getattr(cfg.rollout, "backend", "hf")
    if backend != "hf":
        raise ConfigError(
            f"rollout.max_staleness > 0 runs its rollout worker on the hf backend; "
            f"rollout.backend={backend} is not supported with it yet"
        )


def stale_correction_problem(cfg: Config) -> str | None:
    """Why stale tokens could not be corrected one by one (decoupled PPO) under `cfg`, or None.
    Read by this validation (rollout.max_staleness > 0) and by serve-policy, whose episodes can
    span updates whatever the config says."""
    if cfg.algo.policy_loss != "ppo":
        return (
            "corrects stale tokens one by one (decoupled PPO); "
            f"algo.policy_loss={cfg.algo.policy_loss} is not the token-level ppo loss: use "
            "algo.policy_loss=ppo"
        )
    if cfg.rollout.train_on_observations:
        return (
            "weighs tokens by their behaviour logprobs, which observation tokens do not have: "
            "rollout.train_on_observations must be false"
        )
    if not cfg.algo.recompute_old_logprobs:
        return (
            "takes the PPO ratio against the proximal policy (the learner's weights before the "
            "update): algo.recompute_old_logprobs must be true"
        )
    return None


def _validate_ray(cfg: Config) -> None:
    ray = cfg.ray
    if not ray.enabled:
        for key in RAY_KEYS:
            if _changed(cfg, "ray", key):
                raise ConfigError(f"ray.{key} is set but does nothing: ray.enabled is false")
        return
    if ray.num_env_workers < 1:
        raise ConfigError(f"ray.num_env_workers must be >= 1, got {ray.num_env_workers}")
    if ray.num_cpus < 0 or ray.env_worker_cpus < 0 or ray.max_episode_retries < 0:
        raise ConfigError("ray.num_cpus, ray.env_worker_cpus and ray.max_episode_retries are >= 0")
    if ray.num_cpus and ray.address:
        raise ConfigError(
            f"ray.num_cpus sizes a local cluster, but ray.address={ray.address!r} joins an "
            "existing one (its size is set where it was started)"
        )
    if not ray.generator_actor:
        for key in ("generator_cpus", "generator_gpus"):
            if _changed(cfg, "ray", key):
                raise ConfigError(f"ray.{key} is set but does nothing: ray.generator_actor=false")
    elif ray.generator_cpus < 0 or ray.generator_gpus < 0:
        raise ConfigError("ray.generator_cpus and ray.generator_gpus must be >= 0")
    else:
        _validate_generator_actor(cfg)
    if ray.call_timeout_s <= cfg.env.tool_timeout_s:
        raise ConfigError(
            f"ray.call_timeout_s={ray.call_timeout_s:g} must exceed env.tool_timeout_s="
            f"{cfg.env.tool_timeout_s:g}: a slow but healthy tool call would count as a lost worker"
        )


def _validate_generator_actor(cfg: Config) -> None:
    backend = getattr(cfg.rollout, "backend", "hf")
    if backend != "hf":
        raise ConfigError(
            f"ray.generator_actor runs the hf generator in an actor; rollout.backend={backend} "
            "manages its own engine"
        )
    if getattr(cfg.model, "lora_rank", 0):
        raise ConfigError(
            "ray.generator_actor takes full weights after each update; with model.lora_rank > 0 "
            "only the adapter is sent: keep the generator in the driver (ray.generator_actor=false)"
        )
    if cfg.rollout.max_staleness:
        raise ConfigError(
            "rollout.max_staleness > 0 runs its own rollout worker on a copy of the policy; "
            "it does not combine with ray.generator_actor"
        )

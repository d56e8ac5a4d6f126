"""Validation of rollout.mode=memory, the mode that plays several conversations per episode
(MemAgent's document reader, the multi-agent conversation envs), and of the multi-agent settings
that act only there: the roles to train (`rollout.train_roles`), a policy per role
(`model.role_policies` adapters or models) and advantages grouped per role (`algo.role_groups`).
All three act only on an env with `roles` played with rollout.mode=memory; a role's own policy
(a LoRA adapter on the HF generator's shared model, or a full model with its own HF generator)
is switched in only by the in-process rollout and learner (model/roles.py), so whatever would
compute a role's tokens without its policy is refused here. Called by `validate.validate`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.config.checks import _check_choice, _unused
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import ROLE_POLICIES

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config


def env_roles(env_name: str, options: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The roles of env `env_name` with `options` (env.options): its class's `roles_for(options)`
    where the options choose them (the debate's number of debaters), else its class's `roles`;
    () for an env with one agent."""
    from agentic_rl.envs.registry import env_class

    cls = env_class(env_name)
    roles_for = getattr(cls, "roles_for", None)
    if roles_for is not None:
        return tuple(roles_for(options or {}))
    return tuple(getattr(cls, "roles", ()))


def validate_memory_mode(cfg: Config) -> None:
    """rollout.mode=memory (MemAgent, rollout/memory.py) plays envs that read a document into a
    memory, in-process, and trains each conversation with its episode's advantage."""
    from agentic_rl.envs.registry import env_class

    cls = env_class(cfg.env.name)
    if not (getattr(cls, "memory_reader", False) or getattr(cls, "conversations", False)):
        raise ConfigError(
            f"rollout.mode=memory plays several conversations per episode: env.name="
            f"{cfg.env.name} is not a memory-reading or conversation env (memagent, memory_r1)"
        )
    if cfg.ray.enabled:
        raise ConfigError("rollout.mode=memory runs its envs in-process: set ray.enabled=false")
    _unused(
        cfg,
        ["rollout.history_window"],
        "rollout.mode=memory builds each conversation from the problem, memory and section",
    )


def validate_roles(cfg: Config) -> None:
    """rollout.train_roles names roles of the env; model.role_policies (other than shared) and
    algo.role_groups need a multi-agent env in rollout.mode=memory; a policy per role needs the
    in-process HF generator and nothing that computes a role's tokens without its policy; role
    groups need a per-episode group estimator."""
    _check_choice("model.role_policies", cfg.model.role_policies, ROLE_POLICIES)
    _validate_team_dir(cfg)
    _validate_train_roles(cfg)
    own = cfg.model.role_policies != "shared"
    wanted = [
        key
        for key, on in (
            (f"model.role_policies={cfg.model.role_policies}", own),
            ("algo.role_groups", cfg.algo.role_groups),
        )
        if on
    ]
    if not wanted:
        return
    if cfg.rollout.mode != "memory" or not env_roles(cfg.env.name, cfg.env.options):
        raise ConfigError(
            f"{' and '.join(wanted)} act on a multi-agent env (one with roles, e.g. "
            f"env.name=planner_executor or solver_verifier) played with rollout.mode=memory; "
            f"env.name={cfg.env.name} with rollout.mode={cfg.rollout.mode} has no roles"
        )
    if cfg.algo.role_groups:
        estimator = ADVANTAGE_ESTIMATORS[cfg.algo.name]
        if estimator.turn_level:
            raise ConfigError(
                f"algo.role_groups does nothing with algo.name={cfg.algo.name}: a turn-level "
                "estimator always credits each role's turns on their own, compared within "
                "(task group x role); drop algo.role_groups"
            )
        if not (estimator.per_episode and estimator.needs_groups):
            names = [n for n, e in ADVANTAGE_ESTIMATORS.items() if e.per_episode and e.needs_groups]
            raise ConfigError(
                f"algo.role_groups normalises each role's rewards within its task group: "
                f"algo.name={cfg.algo.name} is not a group estimator (use one of {names})"
            )
    if own:
        _validate_role_policies(cfg)


def _validate_team_dir(cfg: Config) -> None:
    """model.name may be an exported team (DIR/roles.json, model/roles.py `team_manifest`): it
    holds a full model per role, so it loads as model.role_policies=models, for an env with
    exactly its roles."""
    from agentic_rl.model.roles import TEAM_ROLES_DIR, team_manifest

    team = team_manifest(cfg.model.name)
    if team is None:
        return
    if cfg.model.role_policies != "models":
        raise ConfigError(
            f"model.name={cfg.model.name} is an exported team (a model per role in "
            f"{TEAM_ROLES_DIR}/): set model.role_policies=models to play it as a team, or "
            f"model.name={cfg.model.name}/{TEAM_ROLES_DIR}/ROLE for one role's model alone"
        )
    roles = env_roles(cfg.env.name, cfg.env.options)
    if sorted(team["paths"]) != sorted(roles):
        raise ConfigError(
            f"model.name={cfg.model.name} is a team of roles {sorted(team['paths'])}, but "
            f"env.name={cfg.env.name} has roles {sorted(roles)}"
        )


def _validate_train_roles(cfg: Config) -> None:
    """rollout.train_roles names roles of a multi-agent conversation env (its class's `roles`),
    which only rollout.mode=memory plays role by role."""
    roles = cfg.rollout.train_roles
    if not roles:
        return
    known = env_roles(cfg.env.name, cfg.env.options)
    if cfg.rollout.mode != "memory" or not known:
        raise ConfigError(
            f"rollout.train_roles={roles} picks agents of a multi-agent env played with "
            f"rollout.mode=memory; env.name={cfg.env.name} with rollout.mode={cfg.rollout.mode} "
            "has no roles (e.g. env.name=planner_executor)"
        )
    unknown = [r for r in roles if r not in known]
    if unknown:
        raise ConfigError(
            f"rollout.train_roles names {unknown}, which env.name={cfg.env.name} does not have "
            f"(its roles: {', '.join(known)})"
        )


def _validate_role_policies(cfg: Config) -> None:
    """What a role's own policy (model.role_policies adapters or models) cannot run with."""
    choice = cfg.model.role_policies
    adapters = choice == "adapters"
    refusals = [
        (
            adapters and cfg.model.lora_rank <= 0,
            "model.lora_rank",
            "each role's policy is a LoRA adapter: set model.lora_rank > 0",
        ),
        (
            not adapters and cfg.model.lora_rank > 0,
            "model.lora_rank",
            "each role would copy the frozen base with its adapter: use "
            "model.role_policies=adapters (an adapter per role on one base)",
        ),
        (
            cfg.rollout.backend != "hf",
            "rollout.backend",
            "a separate generator (vllm) holds one "
            + ("adapter" if adapters else "model")
            + ": use rollout.backend=hf",
        ),
        (
            ADVANTAGE_ESTIMATORS[cfg.algo.name].needs_value_head,
            "algo.name",
            f"{cfg.algo.name}'s "
            "critic is one model, not one per role: use a group estimator (grpo, rloo, dr_grpo)",
        ),
        (
            cfg.rollout.max_staleness > 0,
            "rollout.max_staleness",
            "asynchronous rollouts would "
            "switch role policies while the learner computes: use rollout.max_staleness=0",
        ),
        (
            cfg.learner.strategy != "single",
            "learner.strategy",
            "the sharded learner wraps one model, not one per role: use learner.strategy=single",
        ),
        (
            cfg.dpo.failure_tasks > 0,
            "dpo.failure_tasks",
            "failure DPO scores without a role's policy",
        ),
        (
            bool(cfg.distill.teacher),
            "distill.teacher",
            "distillation scores without a role's policy",
        ),
    ]
    for refused, key, why in refusals:
        if refused:
            raise ConfigError(f"model.role_policies={choice} with {key}: {why}")

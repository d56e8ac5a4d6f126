"""What a run holds and the plumbing around it: the `Setup` (models, tokenizer, generator,
tasks, chat format) and `build`, which fills one from the config; the optimizer over its
trainable parameters, the learning-rate schedule and the run's output directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.backends.base import Generator, make_generator
from agentic_rl.config.checks import config_differences
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.schema import Config
from agentic_rl.config.validate_engines import resolve_device
from agentic_rl.envs.from_config import make_envs, make_tasks
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.formats.registry import make_chat_format
from agentic_rl.learner.update import adamw
from agentic_rl.model.critic import Critic
from agentic_rl.model.load import ValueHead, frozen_copy
from agentic_rl.model.lora import AdapterReference, is_lora, unwrap
from agentic_rl.model.roles import load_role_policies
from agentic_rl.model.tokens import check_prefix_preserving
from agentic_rl.scale.ray_generator import RayGenerator
from agentic_rl.scale.ray_pool import EnvPool
from agentic_rl.train.distill import load_teacher, teacher_checkpoint
from agentic_rl.types import Task


@dataclass
class Setup:
    """Everything a run holds: models, tokenizer, generator, tasks, chat format."""

    cfg: Config
    policy: nn.Module
    tokenizer: Any
    generator: Generator
    fmt: ChatFormat
    train_tasks: list[Task]
    eval_tasks: list[Task]
    # algo.kl_coef > 0: a frozen model, or with LoRA after a warm start an AdapterReference
    # (the policy's base with frozen adapters); None with LoRA otherwise (the adapters off)
    reference: nn.Module | None = None
    teacher: nn.Module | None = None  # distill.teacher: frozen, scores the student's tokens
    value_head: nn.Module | None = None  # ppo: a ValueHead (algo.critic=shared) or a Critic
    env_pool: Any = None  # ray_pool.EnvPool with ray.enabled (envs on Ray actors), else None
    dp: Any = None  # fsdp.DataParallel with learner.strategy=fsdp2 (under torchrun), else None
    device: torch.device = torch.device("cpu")  # trainer.device, resolved: where the models live


def make_optimizer(setup: Setup) -> torch.optim.Optimizer:
    """AdamW over the policy's trainable parameters and, for ppo, a second parameter group for
    the critic (value head, or a separate critic's backbone too) at algo.critic_lr. Each group
    keeps its own peak rate as "base_lr" (set_learning_rate)."""
    cfg = setup.cfg.optim
    groups = [{"params": [p for p in setup.policy.parameters() if p.requires_grad]}]
    groups[0]["base_lr"] = cfg.lr
    if setup.value_head is not None:
        critic_lr = setup.cfg.algo.critic_lr or cfg.lr
        groups.append(
            {"params": list(setup.value_head.parameters()), "lr": critic_lr, "base_lr": critic_lr}
        )
    return adamw(
        groups,
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        weight_decay=cfg.weight_decay,
    )


def set_learning_rate(optimizer: torch.optim.Optimizer, cfg: Config, step: int) -> None:
    """Linear warmup over `optim.warmup_steps`, then constant. A pure function of the step, so a
    resumed run needs no scheduler state."""
    warmup = cfg.optim.warmup_steps
    factor = min(1.0, step / warmup) if warmup else 1.0
    for group in optimizer.param_groups:
        group["lr"] = group.get("base_lr", cfg.optim.lr) * factor


def run_dir(cfg: Config) -> Path:
    return Path(cfg.trainer.out_dir) / (cfg.trainer.run_name or cfg.recipe)


def check_resume(out: Path, checkpoint: Path, cfg: Config) -> None:
    """Refuse to resume `checkpoint` of run `out` when the run's settings (OUT/config.json)
    differ from `cfg` beyond what a resume may change (config/checks.py RESUMABLE_KEYS), unless
    trainer.resume=force: continuing would mix two experiments in one run, e.g. a `--smoke`
    run resuming a full one or a changed learning rate continuing an old run's weights."""
    saved_file = out / "config.json"
    if cfg.trainer.resume == "force" or not saved_file.is_file():
        return
    saved = json.loads(saved_file.read_text())
    changed = config_differences(saved, cfg.to_dict(), Config().to_dict())
    if changed:
        raise ConfigError(
            f"{out} holds a run with other settings (checkpoint {checkpoint.name}); changed: "
            f"{', '.join(changed)}. Use another trainer.run_name or trainer.out_dir for a new "
            "run, or --force (trainer.resume=force) to resume anyway"
        )


def build(cfg: Config) -> Setup:
    """Make the tasks and an env, then load the models, tokenizer and generator and the chat
    format. The user's own inputs (task files, level files, env ids, env options) are read and
    checked first: a bad one fails in seconds, not after the model has loaded."""
    train_tasks, eval_tasks = make_tasks(cfg, "train"), make_tasks(cfg, "eval")
    if cfg.distill.teacher:
        teacher_checkpoint(cfg)  # a missing teacher fails before any model loads
    env = make_envs(cfg, 1)[0]
    tools = env.tools
    torch.manual_seed(cfg.trainer.seed)
    device = resolve_device(cfg)  # trainer.device: the reference and critic follow the policy
    # model.role_policies: each role its own adapter, full copy or exported model (model/roles.py)
    roles = getattr(env, "roles", ())  # a single-agent env declares none
    policy, tokenizer = load_role_policies(
        cfg.model, roles, cfg.rollout.train_roles, seed=cfg.trainer.seed
    )
    policy = policy.to(device)  # before the generator: the HF one samples with this object
    check_prefix_preserving(tokenizer)
    setup = Setup(
        cfg=cfg,
        policy=policy,
        tokenizer=tokenizer,
        generator=make_generator(cfg, policy, tokenizer),  # rollout.backend: hf or vllm
        fmt=make_chat_format(cfg.rollout.chat_format, tools, tokenizer),
        train_tasks=train_tasks,
        eval_tasks=eval_tasks,
        device=device,
    )
    if cfg.algo.kl_coef > 0 and not is_lora(policy):
        setup.reference = frozen_copy(policy)  # role models: each role's reference is its own
    elif cfg.algo.kl_coef > 0 and trains_before_rl(cfg):
        # LoRA: the reference is the adapter-off base (setup.reference None), unless a stage
        # before RL moves the adapters: KL to the base would then pull the policy back past its
        # warm start, so the reference is the one base with a frozen copy of the adapters (every
        # role's), set to the warm-started ones by start_from_policy.
        setup.reference = AdapterReference(policy)
    if cfg.distill.teacher:  # on-policy distillation (train/distill.py)
        setup.teacher = load_teacher(cfg, tokenizer, device)
    if ADVANTAGE_ESTIMATORS[cfg.algo.name].needs_value_head:  # the critic (model/critic.py)
        shared = cfg.algo.critic == "shared"
        setup.value_head = ValueHead(policy.config.hidden_size) if shared else Critic(policy)
        setup.value_head.to(device)
    if cfg.ray.enabled:  # envs (and the generator) on Ray actors; Ray is imported only here
        attach_ray(setup)
    return setup


def trains_before_rl(cfg: Config) -> bool:
    """Whether the policy's weights move before RL (a warm start, failure DPO), so that the KL
    reference and a separate critic must start from them (`start_from_policy`) and a checkpoint
    must hold the reference (it cannot be rebuilt from model.name)."""
    return cfg.warm_start.num_tasks > 0 or cfg.dpo.failure_tasks > 0


def start_from_policy(setup: Setup) -> None:
    """After the policy's weights were set outside RL (a warm start, loaded weights): the frozen
    reference and a separate critic's backbone start from them too, as they would from the
    model RL starts from (veRL initialises reference and critic from the actor's checkpoint)."""
    if isinstance(setup.reference, AdapterReference):
        setup.reference.copy_from(setup.policy)
    elif setup.reference is not None:
        setup.reference.load_state_dict(setup.policy.state_dict())
    if isinstance(setup.value_head, Critic):
        setup.value_head.copy_backbone_from(setup.policy)


def attach_ray(setup: Setup) -> None:
    """Put the run's envs (and with ray.generator_actor its generator) on Ray actors."""
    pool = EnvPool(setup.cfg)
    setup.env_pool = pool
    if setup.cfg.ray.generator_actor:
        setup.generator = RayGenerator(setup.cfg, unwrap(setup.policy), setup.tokenizer)
        pool.others.append(setup.generator.actor)

"""What a run holds and the plumbing around it: the `Setup` (models, tokenizer, generator,
tasks, chat format) and `build`, which fills one from the config; the optimizer over its
trainable parameters, the learning-rate schedule and the run's output directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.base import Generator, make_generator
from agentic_rl.config.schema import Config
from agentic_rl.envs.from_config import make_envs, make_tasks
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.formats.registry import make_chat_format
from agentic_rl.learner.update import adamw
from agentic_rl.model.load import ValueHead, frozen_copy, load_policy
from agentic_rl.model.lora import is_lora, unwrap
from agentic_rl.model.tokens import check_prefix_preserving
from agentic_rl.scale.ray_generator import RayGenerator
from agentic_rl.scale.ray_pool import EnvPool
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
    reference: nn.Module | None = None
    value_head: nn.Module | None = None
    env_pool: Any = None  # ray_pool.EnvPool with ray.enabled (envs on Ray actors), else None
    dp: Any = None  # fsdp.DataParallel with learner.strategy=fsdp2 (under torchrun), else None


def make_optimizer(setup: Setup) -> torch.optim.Optimizer:
    cfg = setup.cfg.optim
    params = [p for p in setup.policy.parameters() if p.requires_grad]
    if setup.value_head is not None:
        params += list(setup.value_head.parameters())
    return adamw(
        params,
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
        group["lr"] = cfg.optim.lr * factor


def run_dir(cfg: Config) -> Path:
    return Path(cfg.trainer.out_dir) / (cfg.trainer.run_name or cfg.recipe)


def build(cfg: Config) -> Setup:
    """Load the models, tokenizer and generator, make the tasks and the chat format."""
    torch.manual_seed(cfg.trainer.seed)
    policy, tokenizer = load_policy(cfg.model, seed=cfg.trainer.seed)
    check_prefix_preserving(tokenizer)
    tools = make_envs(cfg, 1)[0].tools
    setup = Setup(
        cfg=cfg,
        policy=policy,
        tokenizer=tokenizer,
        generator=make_generator(cfg, policy, tokenizer),  # rollout.backend: hf or vllm
        fmt=make_chat_format(cfg.rollout.chat_format, tools, tokenizer),
        train_tasks=make_tasks(cfg, "train"),
        eval_tasks=make_tasks(cfg, "eval"),
    )
    if cfg.algo.kl_coef > 0 and not is_lora(policy):  # LoRA: the adapter-off policy instead
        setup.reference = frozen_copy(policy)
    if cfg.algo.name == "ppo":
        setup.value_head = ValueHead(policy.config.hidden_size)
    if cfg.ray.enabled:  # envs (and the generator) on Ray actors; Ray is imported only here
        attach_ray(setup)
    return setup


def attach_ray(setup: Setup) -> None:
    """Put the run's envs (and with ray.generator_actor its generator) on Ray actors."""
    pool = EnvPool(setup.cfg)
    setup.env_pool = pool
    if setup.cfg.ray.generator_actor:
        setup.generator = RayGenerator(setup.cfg, unwrap(setup.policy), setup.tokenizer)
        pool.others.append(setup.generator.actor)

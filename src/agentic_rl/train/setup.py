"""What a run holds and the plumbing around it: the `Setup` (models, tokenizer, generator,
tasks, chat format), the optimizer over its trainable parameters, the learning-rate schedule and
the run's output directory. `build` (trainer.py) fills a Setup from the config; the training
loop there uses the rest. Re-exported from trainer.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.base import Generator
from agentic_rl.config.load import Config
from agentic_rl.learner.update import adamw
from agentic_rl.rollout.formats.chat import ChatFormat
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

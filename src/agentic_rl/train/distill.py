"""On-policy distillation in a run (`distill.teacher`): load the frozen teacher, and on each
step's batch score the student's sampled tokens with it and put the per-token reverse KL into
the advantages (algos/distill.py). Called by `build` (the teacher) and `update_policy` (the
step), so the learner then trains on those advantages with the run's policy loss.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from agentic_rl.algos.distill import reverse_kl_advantages
from agentic_rl.algos.masked import masked_mean
from agentic_rl.checkpoint.export import resolve_checkpoint, run_model_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import TrainBatch
from agentic_rl.learner.update import forward_no_grad, sampling_temperature
from agentic_rl.model.load import autocast, load_policy

if TYPE_CHECKING:
    from agentic_rl.train.setup import Setup


def teacher_checkpoint(cfg: Config) -> Path | None:
    """Check `distill.teacher` before any model loads: None for a Hugging Face model directory
    (config.json), else the checkpoint to load (the directory itself, or a run directory's
    latest). A ConfigError names the key and what a teacher may be."""
    from agentic_rl.checkpoint.layout import CheckpointError

    path = Path(cfg.distill.teacher)
    try:  # first: a run directory has a config.json too (the run's settings)
        return resolve_checkpoint(path)
    except CheckpointError as err:
        if (path / "config.json").is_file():
            return None
        raise ConfigError(
            f"distill.teacher={path}: not a Hugging Face model directory (no config.json) and "
            f"not a checkpoint or run directory ({err}); train the teacher first, e.g. "
            "`agentic-rl train search_qa_grpo`, or point it at a model directory"
        ) from err


def load_teacher(cfg: Config, tokenizer: Any, device: torch.device) -> nn.Module:
    """The frozen teacher of `distill.teacher`: a Hugging Face model directory (config.json),
    or a checkpoint / run directory (its latest checkpoint) loaded with that run's model
    settings. The teacher must score the student's token ids, so its vocabulary must be the
    student's; otherwise a ConfigError names both."""
    path = Path(cfg.distill.teacher)
    checkpoint = teacher_checkpoint(cfg)
    if checkpoint is None:
        teacher, teacher_tokenizer = load_policy(
            dataclasses.replace(cfg.model, name=str(path), lora_rank=0)
        )
    else:
        from agentic_rl.checkpoint.io import load_checkpoint
        from agentic_rl.checkpoint.layout import is_sharded
        from agentic_rl.checkpoint.sharded import load_full_policy

        teacher, teacher_tokenizer = load_policy(run_model_config(checkpoint))
        if is_sharded(checkpoint):
            load_full_policy(checkpoint, teacher)
        else:
            load_checkpoint(checkpoint, teacher, restore_rng=False)
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ConfigError(
            f"distill.teacher={path} has another vocabulary than model.name={cfg.model.name} "
            f"({len(teacher_tokenizer)} vs {len(tokenizer)} tokens): the teacher scores the "
            "student's token ids, so both need the same tokenizer"
        )
    teacher.eval()
    for param in teacher.parameters():
        param.requires_grad_(False)
    return teacher.to(device)


def distill_batch(setup: Setup, batch: TrainBatch) -> dict[str, float]:
    """Score the batch's sampled tokens with the teacher and the student (the learner's own
    pass, not the generator's logprobs: those may be of another precision or a top-p-truncated
    distribution), then ``A <- A - coef * (log pi_student - log pi_teacher)`` on every policy
    token (``A = 0`` first with distill.task_reward=false). Both at the sampling temperature.
    Returns the metrics: the mean per-token reverse KL (k1) and the teacher's mean logprob of
    the student's tokens."""
    cfg = setup.cfg
    assert setup.teacher is not None and batch.advantages is not None
    chunk, micro = cfg.model.logprob_chunk_size, cfg.optim.micro_batch_size
    share, temp = cfg.model.share_prefix, sampling_temperature(cfg)
    with autocast(cfg.learner.mixed_precision, next(setup.policy.parameters()).device):
        budget = cfg.optim.micro_batch_tokens
        teacher_lp, _ = forward_no_grad(
            setup.teacher, batch, chunk, micro, share_prefix=share, temperature=temp,
            max_tokens=budget,
        )  # fmt: skip
        student_lp, _ = forward_no_grad(
            setup.policy, batch, chunk, micro, share_prefix=share, temperature=temp,
            max_tokens=budget,
        )  # fmt: skip
    mask = batch.loss_mask
    base = batch.advantages if cfg.distill.task_reward else torch.zeros_like(batch.advantages)
    batch.advantages = reverse_kl_advantages(base, student_lp, teacher_lp, mask, cfg.distill.coef)
    return {
        "distill_reverse_kl": float(masked_mean(student_lp - teacher_lp, mask)),
        "distill_teacher_logprob": float(masked_mean(teacher_lp, mask)),
    }

"""Supervised training on trajectories: the warm start before RL (and the SFT stage of recipes).

Only loss-mask-1 tokens are trained (the agent's own turns); prompts and observations inserted
by the framework carry no loss, exactly as in RL.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from torch import nn

from agentic_rl.learner import collate
from agentic_rl.models import token_logprobs
from agentic_rl.types import Trajectory


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood per trained token: -sum(mask * logp) / sum(mask).

    logprobs, mask: [N, T] -> scalar. Token-level mean, so long and short episodes weigh by their
    number of agent tokens."""
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1)


def train_sft(
    model: nn.Module,
    trajectories: list[Trajectory],
    pad_token_id: int,
    epochs: int = 1,
    lr: float = 1e-4,
    batch_size: int = 8,
    chunk_size: int = 64,
    seed: int = 0,
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict[str, float]:
    """Fine-tune `model` on the agent tokens of `trajectories` with AdamW (constant lr).

    `on_step(step, total_steps, loss)` is called after each optimiser step (progress display).
    Returns the first and last batch losses."""
    if not trajectories:
        raise ValueError("no trajectories to train on")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(seed)
    order = list(range(len(trajectories)))
    total = epochs * ((len(order) + batch_size - 1) // batch_size)
    losses: list[float] = []
    model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            batch = collate(
                [trajectories[i] for i in order[start : start + batch_size]], pad_token_id
            )
            logprobs, _, _ = token_logprobs(
                model,
                batch.input_ids,
                batch.attention_mask,
                chunk_size,
                positions=batch.loss_mask > 0,
            )
            loss = sft_loss(logprobs, batch.loss_mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
    return {"first_loss": losses[0], "last_loss": losses[-1], "steps": float(len(losses))}

"""Supervised training on trajectories: the warm start before RL, the SFT stage of recipes and
`agentic-rl sft` (trajectory JSONL files, format below).

Only loss-mask-1 tokens are trained (the agent's own turns); prompts and observations inserted
by the framework carry no loss, exactly as in RL.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.checkpoint.export import save_model
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.schema import Config
from agentic_rl.errors import UserInputError
from agentic_rl.learner.batch import collate, micro_batch_bounds, row_tokens
from agentic_rl.learner.update import adamw
from agentic_rl.model.load import autocast, token_logprobs
from agentic_rl.model.vision import vision_inputs
from agentic_rl.types import ImageRef, Trajectory


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood per trained token: -sum(mask * logp) / sum(mask).

    logprobs, mask: [N, T] -> scalar. Token-level mean, so long and short episodes weigh by their
    number of agent tokens."""
    return -(logprobs * mask).sum() / mask.sum().clamp(min=1)


def sft_precision(cfg: Config) -> str:
    """learner.mixed_precision for a supervised stage in this process ("no" under fsdp2, whose
    sharded update applies its own mixed-precision policy)."""
    return cfg.learner.mixed_precision if cfg.learner.strategy == "single" else "no"


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
    micro_batch_size: int = 0,
    mixed_precision: str = "no",
    share_prefix: bool = False,
    param_groups: list[dict[str, Any]] | None = None,
    micro_batch_tokens: int = 0,
) -> dict[str, float]:
    """Fine-tune `model` on the agent tokens of `trajectories` with AdamW (constant lr).

    Each batch of `batch_size` trajectories is one optimiser step, run as micro-batches of
    `micro_batch_size` rows (0: the whole batch at once) and, with `micro_batch_tokens` > 0, of
    at most that many tokens as the pass runs them (optim.micro_batch_tokens: long prompts
    stay within memory), whose gradients add up to the batch's: each micro-batch's summed
    token loss is divided by the batch's token count.
    `mixed_precision="bf16"` runs forward and backward under bfloat16 autocast (float32 weights
    and optimizer state), as the single-process RL update does with learner.mixed_precision.
    `on_step(step, total_steps, loss)` is called after each optimiser step (progress display).
    `share_prefix` (model.share_prefix) runs a micro-batch's common leading tokens once
    (model/prefix_sharing.py; same numbers up to float rounding): demos of conversation envs
    (one conversation per fact or section) all start with the same instructions, often more
    tokens than the trained reply.
    `param_groups` (AdamW's, e.g. a learning rate per part of the model) replaces the default
    single group of every parameter that requires a gradient at `lr`.
    Returns the first and last batch losses."""
    if not trajectories:
        raise ValueError("no trajectories to train on")
    optimizer = adamw(
        param_groups or [p for p in model.parameters() if p.requires_grad],  # type: ignore[arg-type]
        lr=lr,
    )
    rng = random.Random(seed)
    order = list(range(len(trajectories)))
    total = epochs * ((len(order) + batch_size - 1) // batch_size)
    losses: list[float] = []
    model.train()
    device = next(model.parameters()).device
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            rows = [trajectories[i] for i in order[start : start + batch_size]]
            tokens = max(sum(sum(t.loss_mask) for t in rows), 1)
            micro = micro_batch_size if micro_batch_size > 0 else len(rows)
            cost = None
            if micro_batch_tokens > 0:  # the rows' lengths and shared prefixes, as the learner's
                whole = collate(rows, pad_token_id)
                cost = row_tokens(whole.input_ids, whole.attention_mask, share_prefix)
            optimizer.zero_grad(set_to_none=True)
            batch_loss = 0.0
            for first, end in micro_batch_bounds(len(rows), micro, None, cost, micro_batch_tokens):
                batch = collate(rows[first:end], pad_token_id).to(device)
                with autocast(mixed_precision, device):
                    logprobs, _, _ = token_logprobs(
                        model,
                        batch.input_ids,
                        batch.attention_mask,
                        chunk_size,
                        positions=batch.loss_mask > 0,
                        share_prefix=share_prefix,
                        model_inputs=vision_inputs(model, batch.images, device, batch.input_ids),
                    )
                loss = sft_loss(logprobs.float(), batch.loss_mask) * (
                    batch.loss_mask.sum() / tokens
                )
                loss.backward()
                batch_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(batch_loss)
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
    return {"first_loss": losses[0], "last_loss": losses[-1], "steps": float(len(losses))}


# ---------------------------------------------------------------------------------------------
# Trajectory files (JSONL) and the `agentic-rl sft` command
# ---------------------------------------------------------------------------------------------
#
# One JSON object per line, in either form:
#   token-native: {"token_ids": [int], "loss_mask": [0|1], "logprobs"?: [float], "reward"?: float,
#                  "task_id"?: str, "images"?: [{"path", "sha256"}]}   (what `save_trajectories`
#                  and `--save-data` write; images by reference, in placeholder order)
#   messages:     {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str}]}
#                 rendered with the model's chat template; the assistant turns (their content
#                 and end-of-turn token) get loss mask 1, everything else 0. These are user
#                 data, not model samples, so tokenising their text is right here.


class TrajectoryFormatError(UserInputError, ValueError):
    """A trajectory file line is malformed; the message names the line."""


def warm_start_sft(
    cfg: Config,
    model: nn.Module,
    trajectories: list[Trajectory],
    pad_token_id: int,
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict[str, float]:
    """`train_sft` with the recipe's `warm_start` settings (epochs, lr, batch size), its
    micro-batch, log-prob chunk, seed and precision: the one supervised step that the RL warm
    start, `agentic-rl sft` and KnownSelf's SFT stage share."""
    return train_sft(
        model,
        trajectories,
        pad_token_id,
        epochs=cfg.warm_start.epochs,
        lr=cfg.warm_start.lr,
        batch_size=cfg.warm_start.batch_size,
        chunk_size=cfg.model.logprob_chunk_size,
        seed=cfg.trainer.seed,
        on_step=on_step,
        micro_batch_size=cfg.optim.micro_batch_size,
        micro_batch_tokens=cfg.optim.micro_batch_tokens,
        mixed_precision=sft_precision(cfg),
        share_prefix=cfg.model.share_prefix and cfg.learner.strategy == "single",
    )


def _template_ids(tokenizer: Any, messages: list[dict[str, str]], generation: bool) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def encode_messages(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids and loss mask of a chat: 1 on each assistant message's tokens (after the
    template's assistant header, through its end-of-turn token), 0 elsewhere. Built message by
    message; raises TrajectoryFormatError if the template is not prefix-preserving."""
    ids: list[int] = []
    mask: list[int] = []
    for k, message in enumerate(messages):
        if message.get("role") not in ("system", "user", "assistant", "tool"):
            raise TrajectoryFormatError(f"message {k}: unknown role {message.get('role')!r}")
        head = (
            _template_ids(tokenizer, messages[:k], True) if message["role"] == "assistant" else ids
        )
        full = _template_ids(tokenizer, messages[: k + 1], False)
        if head[: len(ids)] != ids or full[: len(head)] != head:
            raise TrajectoryFormatError(
                f"message {k}: the chat template is not prefix-preserving, cannot mask turns"
            )
        generated = 1 if message["role"] == "assistant" else 0
        mask += [0] * (len(head) - len(ids)) + [generated] * (len(full) - len(head))
        ids = full
    return ids, mask


def record_to_trajectory(record: dict[str, Any], tokenizer: Any, where: str = "") -> Trajectory:
    """A trajectory from one JSONL record (token-native or messages; see above)."""
    if "token_ids" in record:
        ids, mask = record["token_ids"], record.get("loss_mask")
        if mask is None or len(mask) != len(ids):
            raise TrajectoryFormatError(f"{where}: loss_mask missing or not as long as token_ids")
    elif "messages" in record:
        ids, mask = encode_messages(tokenizer, record["messages"])
    else:
        raise TrajectoryFormatError(f"{where}: needs 'token_ids' + 'loss_mask' or 'messages'")
    if not any(mask):
        raise TrajectoryFormatError(f"{where}: no loss-mask-1 token, nothing to train")
    first = mask.index(1)
    return Trajectory(
        token_ids=[int(i) for i in ids],
        loss_mask=[int(bool(m)) for m in mask],
        logprobs=[float(x) for x in record.get("logprobs", [0.0] * len(ids))],
        prompt_length=first,
        reward=float(record.get("reward", 0.0)),
        task_id=str(record.get("task_id", "")),
        images=[ImageRef(str(i["path"]), str(i["sha256"])) for i in record.get("images", [])],
    )


def load_trajectories(path: str | Path, tokenizer: Any) -> list[Trajectory]:
    """Read a trajectory JSONL file (blank lines skipped)."""
    out = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TrajectoryFormatError(f"{path}:{number}: not JSON ({err})") from err
        out.append(record_to_trajectory(record, tokenizer, f"{path}:{number}"))
    if not out:
        raise TrajectoryFormatError(f"{path}: no trajectories")
    return out


def save_trajectories(path: str | Path, trajectories: list[Trajectory]) -> None:
    """Write trajectories in the token-native JSONL form."""
    with Path(path).open("w") as fh:
        for t in trajectories:
            record = {
                "token_ids": t.token_ids,
                "loss_mask": t.loss_mask,
                "reward": t.reward,
                "task_id": t.task_id,
            }
            if t.images:  # by reference: the file and its hash (model/images.py)
                record["images"] = [{"path": i.path, "sha256": i.sha256} for i in t.images]
            fh.write(json.dumps(record) + "\n")


def run_sft(cfg: Config, data: str | None, out: Path, save_data: str | None = None) -> dict:
    """`agentic-rl sft`: fine-tune the recipe's model on `data` (or on freshly generated
    scripted-expert episodes of warm_start.num_tasks training tasks) with the warm_start
    settings; saves OUT/model and OUT/sft_summary.json."""
    from agentic_rl.train.collect import expert_demos
    from agentic_rl.train.setup import build

    setup = build(cfg)
    if data:
        trajectories = load_trajectories(data, setup.tokenizer)
    elif cfg.warm_start.num_tasks > 0:
        trajectories, episodes = expert_demos(setup, cfg.warm_start.num_tasks)
        print(f"generated {episodes} scripted-expert episodes ({len(trajectories)} samples)")
    else:
        raise ConfigError("sft: give --data or set warm_start.num_tasks > 0 for expert episodes")
    if save_data:
        save_trajectories(save_data, trajectories)
    result = warm_start_sft(cfg, setup.policy, trajectories, setup.tokenizer.pad_token_id)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        **result,
        "trajectories": len(trajectories),
        "model": str(save_model(setup.policy, setup.tokenizer, out)),
    }
    (out / "sft_summary.json").write_text(json.dumps(summary, indent=2))
    return summary

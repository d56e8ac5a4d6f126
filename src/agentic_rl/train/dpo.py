"""Preference training (DPO, Rafailov et al. 2023) on trajectory pairs: `agentic-rl dpo`.

The preference stage of KnownSelf (step-type pairs) and UI-TARS ("learn from failure": a failed
step vs its correction). A pairs file is JSONL, one pair per line:

    {"chosen": RECORD, "rejected": RECORD}

where each RECORD is a trajectory record as in `sft.py` (token-native `token_ids` + `loss_mask`,
or chat `messages` whose assistant turns are trained). Sequence log-probabilities sum over the
loss-mask-1 tokens only, so observations an env inserted never count, the same mask as RL/SFT.
The reference is the starting policy: its logps are computed once up front, by the policy itself
before its first update, so no copy of the weights is kept.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.algos.knownself import dpo_nll_loss
from agentic_rl.algos.preference import dpo_loss, dpo_margins, sequence_logps
from agentic_rl.checkpoint.export import save_model
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import adamw
from agentic_rl.model.load import token_logprobs
from agentic_rl.train.sft import TrajectoryFormatError, record_to_trajectory
from agentic_rl.types import Trajectory

Pair = tuple[Trajectory, Trajectory]  # (chosen, rejected)


def load_pairs(path: str | Path, tokenizer: Any) -> list[Pair]:
    """Read a pairs JSONL file (format in the module docstring)."""
    pairs = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TrajectoryFormatError(f"{where}: not JSON ({err})") from err
        if not isinstance(record, dict) or not {"chosen", "rejected"} <= set(record):
            raise TrajectoryFormatError(f"{where}: a pair needs 'chosen' and 'rejected'")
        pairs.append(
            (
                record_to_trajectory(record["chosen"], tokenizer, where + " chosen"),
                record_to_trajectory(record["rejected"], tokenizer, where + " rejected"),
            )
        )
    if not pairs:
        raise TrajectoryFormatError(f"{path}: no pairs")
    return pairs


def pair_logps(
    model: nn.Module, pairs: list[Pair], pad_token_id: int, chunk_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed loss-mask-1 logprobs of the chosen and the rejected trajectories: ([P], [P]).

    Chosen and rejected run in one padded batch; gradients flow if enabled by the caller."""
    batch = collate([c for c, _ in pairs] + [r for _, r in pairs], pad_token_id)
    batch = batch.to(next(model.parameters()).device)  # trainer.device
    logprobs, _, _ = token_logprobs(
        model, batch.input_ids, batch.attention_mask, chunk_size, positions=batch.loss_mask > 0
    )
    logps = sequence_logps(logprobs, batch.loss_mask)
    return logps[: len(pairs)], logps[len(pairs) :]


@torch.no_grad()
def reference_logps(
    reference: nn.Module, pairs: list[Pair], pad_token_id: int, chunk_size: int, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference logps of every pair, computed once before training."""
    reference.eval()
    chosen, rejected = [], []
    with torch.no_grad():  # `reference` may be the policy itself, before its first update
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            c, r = pair_logps(reference, batch, pad_token_id, chunk_size)
            chosen.append(c)
            rejected.append(r)
    return torch.cat(chosen), torch.cat(rejected)


def train_dpo(
    model: nn.Module,
    pairs: list[Pair],
    pad_token_id: int,
    beta: float = 0.1,
    lr: float = 1e-6,
    epochs: int = 1,
    batch_size: int = 4,
    chunk_size: int = 64,
    seed: int = 0,
    on_step: Callable[[int, int, float], None] | None = None,
    nll_coef: float = 0.0,
    reference: nn.Module | None = None,
) -> dict[str, float]:
    """DPO on `pairs` with AdamW; returns losses and the mean implicit-reward margin
    ((log pi/pi_ref)(chosen) - (log pi/pi_ref)(rejected)) and pair accuracy (margin > 0) of the
    last batch. `nll_coef` > 0 adds the chosen trajectory's per-token NLL (KnownSelf,
    algos/knownself.py `dpo_nll_loss`). The reference is `model` as it starts (its logps taken
    before the first update: the same numbers a frozen copy would give, without the copy)
    unless another `reference` model is given."""
    if not pairs:
        raise ValueError("no pairs to train on")
    ref_chosen, ref_rejected = reference_logps(
        model if reference is None else reference, pairs, pad_token_id, chunk_size, batch_size
    )
    optimizer = adamw([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    total = epochs * ((len(order) + batch_size - 1) // batch_size)
    losses: list[float] = []
    margins = torch.zeros(0)
    model.train()
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            chosen, rejected = pair_logps(model, [pairs[i] for i in idx], pad_token_id, chunk_size)
            ref_c, ref_r = ref_chosen[idx], ref_rejected[idx]
            if nll_coef > 0:
                tokens = torch.tensor(
                    [float(sum(pairs[i][0].loss_mask)) for i in idx], device=chosen.device
                )
                loss = dpo_nll_loss(chosen, rejected, ref_c, ref_r, tokens, beta, nll_coef).mean()
            else:
                loss = dpo_loss(chosen, rejected, ref_c, ref_r, beta).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            margins = dpo_margins(chosen, rejected, ref_c, ref_r)
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
    return {
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "margin": float(margins.mean()),
        "accuracy": float((margins > 0).float().mean()),
        "steps": float(len(losses)),
    }


def dpo_from_config(
    cfg: Config,
    policy: nn.Module,
    pairs: list[Pair],
    pad_token_id: int,
    on_step: Callable[[int, int, float], None] | None = None,
    nll_coef: float = 0.0,
) -> dict[str, float]:
    """`train_dpo` of `policy` against itself as it starts, with the recipe's `dpo` settings:
    what `agentic-rl dpo`, UI-TARS's failure pairs and KnownSelf's DPO stage share."""
    return train_dpo(
        policy,
        pairs,
        pad_token_id,
        beta=cfg.dpo.beta,
        lr=cfg.dpo.lr,
        epochs=cfg.dpo.epochs,
        batch_size=cfg.dpo.batch_size,
        chunk_size=cfg.model.logprob_chunk_size,
        seed=cfg.trainer.seed,
        on_step=on_step,
        nll_coef=nll_coef,
    )


def run_dpo(cfg: Config, pairs_path: str, out: Path) -> dict[str, Any]:
    """`agentic-rl dpo`: DPO of the recipe's model on a pairs file with the `dpo` settings;
    saves OUT/model and OUT/dpo_summary.json."""
    from agentic_rl.config.validate_engines import resolve_device
    from agentic_rl.model.load import load_policy

    policy, tokenizer = load_policy(cfg.model, seed=cfg.trainer.seed)
    policy = policy.to(resolve_device(cfg))  # trainer.device
    pairs = load_pairs(pairs_path, tokenizer)

    def on_step(step: int, total: int, loss: float) -> None:
        if step % 10 == 0 or step == total:
            print(f"  dpo step {step}/{total} loss={loss:.4f}", flush=True)

    result = dpo_from_config(cfg, policy, pairs, tokenizer.pad_token_id, on_step=on_step)
    out.mkdir(parents=True, exist_ok=True)
    summary = {**result, "pairs": len(pairs), "model": str(save_model(policy, tokenizer, out))}
    (out / "dpo_summary.json").write_text(json.dumps(summary, indent=2))
    return summary

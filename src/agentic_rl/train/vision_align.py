"""The alignment stage of a grafted vision-language policy (LLaVA's stage 1, made synthetic).

A vision tower grafted onto a text model (model/vision.py `graft_vlm`) starts random: the text
model cannot read its features. This stage trains the tower and the connector, and by default
the text model with them (`freeze_text=True` keeps it frozen as LLaVA's stage 1 does: with a
frozen text model the `<answer>` format itself must then be learned through the image tokens,
which a CPU budget does not reach), on rendered scene questions (envs/visual.py `visual_qa`: which
colour / shape / number is in a cell, where a shape is, how many shapes there are), as
supervised learning on the scripted expert's answers, through the same path RL uses: the env's
image observations, the chat format's placeholder tokens, token-native trajectories with images
by reference, the learner's logprobs on the pixels (train/sft.py). Accuracy is measured on
held-out scenes by greedy generation with the HF generator, before and after, per question
kind, beside the majority-answer baseline of each kind.

    python -m agentic_rl.train.vision_align --out DIR [--train-tasks 1600 --epochs 2 ...]

writes the aligned model to DIR (a local Idefics3 directory: `model.name=DIR`) and the
measurements to DIR/alignment.json (and `--results FILE`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.model.lora import unwrap
from agentic_rl.model.vision import freeze_text_model, save_vlm
from agentic_rl.train.collect import eval_episodes, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.sft import train_sft


class _OutOfTime(Exception):
    """The training budget (`max_minutes`) is spent: stop after this optimiser step."""


def alignment_config(
    model: str, train_tasks: int, eval_tasks: int, seed: int = 0, out_dir: str = "runs"
) -> Config:
    """The run config of the stage: the `visual_qa` env, one answer turn, greedy evaluation."""
    return build_dataclass(
        Config,
        {
            "recipe": "vision_align",
            "model": {"name": model},
            "env": {
                "name": "visual_qa",
                "num_train_tasks": 3 * train_tasks,  # expert_demos draws with replacement
                "num_eval_tasks": eval_tasks,
            },
            "rollout": {
                "tasks_per_step": 1,
                "group_size": 2,
                "max_turns": 1,
                "max_tokens_per_turn": 12,
                "max_total_tokens": 16,
                "eval_batch_size": 50,
            },
            "trainer": {"seed": seed, "out_dir": out_dir, "progress": False},
        },
    )


def accuracy(episodes: list[list[Any]], tasks: list[Any]) -> dict[str, float]:
    """Held-out accuracy overall and per question kind, and each kind's majority-answer
    baseline (the accuracy of always giving the commonest gold answer of that kind)."""
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    golds: dict[str, Counter[str]] = {}
    for samples, task in zip(episodes, tasks, strict=True):
        kind = task.fields["kind"]
        total[kind] += 1
        right[kind] += int(samples[0].metrics.get("success", 0.0) >= 1.0)
        golds.setdefault(kind, Counter())[task.answers[0]] += 1
    out = {"accuracy": sum(right.values()) / max(sum(total.values()), 1)}
    for kind in sorted(total):
        out[f"accuracy/{kind}"] = right[kind] / total[kind]
        out[f"majority/{kind}"] = golds[kind].most_common(1)[0][1] / total[kind]
    out["majority"] = sum(c.most_common(1)[0][1] for c in golds.values()) / max(
        sum(total.values()), 1
    )
    return out


def align_vision(
    model: str,
    out: Path,
    train_tasks: int = 1600,
    eval_tasks: int = 200,
    epochs: int = 2,
    lr: float = 1e-4,
    batch_size: int = 16,
    micro_batch_size: int = 8,
    freeze_text: bool = False,
    seed: int = 0,
    max_minutes: float = 0.0,
) -> dict[str, Any]:
    """Run the stage (module docstring); returns the measurements. `max_minutes` > 0 stops the
    training after the optimiser step that passes it (the steps done are reported)."""
    torch.manual_seed(seed)
    cfg = alignment_config(model, train_tasks, eval_tasks, seed, str(out / "runs"))
    setup = build(cfg)
    policy = unwrap(setup.policy)
    trainable = (
        freeze_text_model(policy) if freeze_text else sum(p.numel() for p in policy.parameters())
    )
    started = time.perf_counter()
    before = accuracy(eval_episodes(setup), setup.eval_tasks)
    eval_seconds = time.perf_counter() - started
    demos, _ = expert_demos(setup, train_tasks)
    started, cpu_started = time.perf_counter(), time.process_time()
    trace: list[tuple[int, float]] = []

    def on_step(step: int, total: int, loss: float) -> None:
        trace.append((step, round(loss, 4)))
        if step % 10 == 0 or step == total:
            print(f"  align step {step}/{total} loss={loss:.3f}", flush=True)
        if max_minutes and time.perf_counter() - started > 60 * max_minutes:
            raise _OutOfTime

    try:
        losses = train_sft(
            policy,
            demos,
            setup.tokenizer.pad_token_id,
            epochs=epochs,
            lr=lr,
            batch_size=batch_size,
            micro_batch_size=micro_batch_size,
            seed=seed,
            on_step=on_step,
        )
    except _OutOfTime:  # the weights keep the steps taken
        losses = {"first_loss": trace[0][1], "last_loss": trace[-1][1], "steps": len(trace)}
    train_seconds = time.perf_counter() - started
    train_cpu = time.process_time() - cpu_started
    after = accuracy(eval_episodes(setup), setup.eval_tasks)
    save_vlm(policy, setup.tokenizer, out)
    result = {
        "model": model,
        "trained": "vision tower + connector" if freeze_text else "everything",
        "trainable_parameters": trainable,
        "train_examples": len(demos),
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "eval_tasks": len(setup.eval_tasks),
        "sft": losses,
        "loss_trace": trace[:: max(len(trace) // 20, 1)],
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(train_cpu, 1),
        "seconds_per_step": round(train_seconds / max(losses["steps"], 1), 2),
        "eval_seconds": round(eval_seconds, 1),
        "before": before,
        "after": after,
    }
    (out / "alignment.json").write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-vision")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--train-tasks", type=int, default=1600)
    parser.add_argument("--eval-tasks", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument(
        "--freeze-text", action="store_true", help="train only the vision tower and connector"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=0.0, help="training time budget")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    result = align_vision(
        args.model,
        args.out,
        args.train_tasks,
        args.eval_tasks,
        args.epochs,
        args.lr,
        args.batch_size,
        args.micro_batch_size,
        args.freeze_text,
        args.seed,
        args.max_minutes,
    )
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(result, indent=2))
    print(json.dumps({"before": result["before"], "after": result["after"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

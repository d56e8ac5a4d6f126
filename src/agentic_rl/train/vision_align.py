"""The alignment stage of a grafted vision-language policy (LLaVA's recipe, made synthetic).

A vision tower grafted onto a text model (model/graft.py `graft_vlm`) starts random: the text
model cannot read its features. Real VLMs are built in stages on a vision encoder pretrained on
its own (CLIP / SigLIP); this stage does the same in two steps:

0. **Tower pretraining** (train/vision_pretrain.py): supervised per-patch classification of
   rendered scenes straight on the tower (each patch is one grid cell: its content, row and
   column), temporary linear heads thrown away afterwards. This departs from LLaVA, which takes
   a pretrained tower as given: none can be downloaded here, so the tower is pretrained on the
   rendered data. Its held-out per-cell probe accuracy is reported. Then the connector is
   warm-started (`prealign_connector`): with the tower frozen, each patch's image token is
   regressed onto the text model's own embedding of its cell's caption words, so the text model
   starts on image tokens that read like the words it must write.
1. **Connector (+ text) alignment** (LLaVA's stage 1, then its QA): supervised learning on the
   scripted expert's answers, a mix of dense captions (`describe`: every object of the scene in
   reading order, so each example supervises every cell and teaches the text model to read the
   image tokens in order) and scene questions (envs/vision/scenes.py `visual_qa`: which colour / shape
   / number is in a cell, where a shape is, how many shapes there are), with a learning rate
   per part: the connector high (it starts random), the text model low, the pretrained tower
   frozen by default (as LLaVA keeps its encoder frozen). `freeze_text=True` trains no text
   weights (LLaVA's stage 1 exactly).

Training goes through the same path RL uses: the env's image observations, the chat format's
placeholder tokens, token-native trajectories with images by reference, the learner's logprobs
on the pixels (train/sft.py). Accuracy is measured on held-out scenes (disjoint by a hash of the
scene from every training picture, stage 0's included) by greedy generation with the HF
generator, before and after, per question kind, beside the majority-answer baseline of each
kind.

Measured without stage 0 (bench/README.md, Perception): a random tower trained only through the
answer words learns the answer prior and never learns to read; with it, see the same section.

    python -m agentic_rl.train.vision_align --out DIR [--pretrain-steps 300 --train-tasks ...]

writes the aligned model to DIR (a local Idefics3 directory: `model.name=DIR`) and the
measurements to DIR/alignment.json (and `--results FILE`).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.envs.vision.scenes import CAPTION_KIND, make_visual_qa_tasks
from agentic_rl.model.graft import save_vlm
from agentic_rl.model.lora import unwrap
from agentic_rl.train.collect import eval_episodes, expert_demos
from agentic_rl.train.setup import build
from agentic_rl.train.sft import train_sft
from agentic_rl.train.vision_pretrain import prealign_connector, pretrain_tower


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
                "max_tokens_per_turn": 64,  # a caption is up to ~45 tokens
                "max_total_tokens": 64,
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


def part_of(name: str) -> str:
    """Which part of an Idefics3-family model a parameter belongs to: tower, connector or text."""
    dotted = f".{name}"
    if ".vision_model." in dotted:
        return "tower"
    return "connector" if ".connector." in dotted else "text"


def learning_rate_groups(
    model: Any, rates: dict[str, float]
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """AdamW parameter groups, one learning rate per part (`rates`: tower / connector / text);
    a part at rate 0 is frozen (its gradients turned off). Returns the groups and the number of
    trainable parameters per part."""
    params: dict[str, list[torch.nn.Parameter]] = {part: [] for part in rates}
    for name, param in unwrap(model).named_parameters():
        part = part_of(name)
        param.requires_grad_(rates[part] > 0)
        if rates[part] > 0:
            params[part].append(param)
    groups = [{"params": ps, "lr": rates[part]} for part, ps in params.items() if ps]
    return groups, {part: sum(p.numel() for p in ps) for part, ps in params.items()}


def align_vision(
    model: str,
    out: Path,
    train_tasks: int = 1600,
    eval_tasks: int = 200,
    epochs: int = 1,
    lr: float = 2e-4,
    batch_size: int = 16,
    micro_batch_size: int = 8,
    freeze_text: bool = False,
    seed: int = 0,
    max_minutes: float = 0.0,
    pretrain_steps: int = 300,
    pretrain_lr: float = 1e-3,
    pretrain_batch_size: int = 64,
    caption_fraction: float = 0.5,
    connector_lr: float = 5e-4,
    tower_lr: float = 0.0,
    connector_steps: int = 200,
) -> dict[str, Any]:
    """Run the stage (module docstring); returns the measurements.

    `pretrain_steps` of stage 0 (0: none, the tower stays as it is), then `connector_steps`
    of the connector's warm start onto the caption words' embeddings (vision_pretrain.py
    `prealign_connector`; 0: none); then `train_tasks` expert
    answers, `caption_fraction` of them dense captions and the rest scene questions, for
    `epochs`, at `lr` for the text model (0 with `freeze_text`), `connector_lr` for the
    connector and `tower_lr` for the tower (0: frozen). `max_minutes` > 0 stops stage 1 after
    the optimiser step that passes it (the steps done are reported)."""
    torch.manual_seed(seed)
    cfg = alignment_config(model, train_tasks, eval_tasks, seed, str(out / "runs"))
    setup = build(cfg)
    policy = unwrap(setup.policy)
    started = time.perf_counter()
    before = accuracy(eval_episodes(setup), setup.eval_tasks)
    eval_seconds = time.perf_counter() - started

    pretrain: dict[str, Any] = {"steps": 0}
    if pretrain_steps > 0:
        print(f"stage 0: tower pretraining, {pretrain_steps} steps", flush=True)

        def on_pretrain(step: int, total: int, loss: float) -> None:
            if step % 50 == 0 or step == total:
                print(f"  tower step {step}/{total} loss={loss:.3f}", flush=True)

        pretrain = pretrain_tower(
            policy,
            steps=pretrain_steps,
            batch_size=pretrain_batch_size,
            lr=pretrain_lr,
            seed=seed,
            on_step=on_pretrain,
        )
        print(f"  probe on held-out scenes: {pretrain['probe_after']}", flush=True)
    connector: dict[str, Any] = {"steps": 0}
    if connector_steps > 0:
        connector = prealign_connector(policy, setup.tokenizer, connector_steps, seed=seed)
        print(f"stage 0: connector warm start: {connector}", flush=True)

    captions = round(caption_fraction * train_tasks)
    questions, _ = (
        expert_demos(setup, train_tasks - captions) if captions < train_tasks else ([], 0)
    )
    caption_demos: list[Any] = []
    if captions:
        qa_tasks = setup.train_tasks
        setup.train_tasks = make_visual_qa_tasks(
            "train", 3 * captions, seed + 1, kinds=[CAPTION_KIND]
        )
        caption_demos, _ = expert_demos(setup, captions)
        setup.train_tasks = qa_tasks
    demos = questions + caption_demos
    random.Random(seed).shuffle(demos)
    rates = {"tower": tower_lr, "connector": connector_lr, "text": 0.0 if freeze_text else lr}
    groups, trainable = learning_rate_groups(policy, rates)
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
            param_groups=groups,
        )
    except _OutOfTime:  # the weights keep the steps taken
        losses = {"first_loss": trace[0][1], "last_loss": trace[-1][1], "steps": len(trace)}
    train_seconds = time.perf_counter() - started
    train_cpu = time.process_time() - cpu_started
    for param in policy.parameters():
        param.requires_grad_(True)
    after = accuracy(eval_episodes(setup), setup.eval_tasks)
    save_vlm(policy, setup.tokenizer, out)
    result = {
        "model": model,
        "seed": seed,
        "stage0_pretrain": pretrain,
        "stage0_connector": connector,
        "trained": {part: rate for part, rate in rates.items() if rate > 0},
        "trainable_parameters": trainable,
        "train_examples": len(demos),
        "caption_examples": len(caption_demos),
        "question_examples": len(questions),
        "epochs": epochs,
        "batch_size": batch_size,
        "eval_tasks": len(setup.eval_tasks),
        "sft": losses,
        "loss_trace": trace[:: max(len(trace) // 20, 1)],
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(train_cpu, 1),
        "seconds_per_step": round(train_seconds / max(losses["steps"], 1), 2),
        "eval_seconds": round(eval_seconds, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
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
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=2e-4, help="the text model's learning rate")
    parser.add_argument("--connector-lr", type=float, default=5e-4)
    parser.add_argument("--tower-lr", type=float, default=0.0, help="stage 1 (0: tower frozen)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument(
        "--freeze-text", action="store_true", help="train no text weights in stage 1"
    )
    parser.add_argument(
        "--caption-fraction", type=float, default=0.5, help="dense captions among the answers"
    )
    parser.add_argument("--pretrain-steps", type=int, default=300, help="stage 0 (0: skip)")
    parser.add_argument("--pretrain-lr", type=float, default=1e-3)
    parser.add_argument(
        "--connector-steps", type=int, default=200, help="connector warm start (0: skip)"
    )
    parser.add_argument("--pretrain-batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-minutes", type=float, default=0.0, help="stage 1 time budget")
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
        pretrain_steps=args.pretrain_steps,
        pretrain_lr=args.pretrain_lr,
        pretrain_batch_size=args.pretrain_batch_size,
        caption_fraction=args.caption_fraction,
        connector_lr=args.connector_lr,
        tower_lr=args.tower_lr,
        connector_steps=args.connector_steps,
    )
    if args.results is not None:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        args.results.write_text(json.dumps(result, indent=2))
    summary = {k: result[k] for k in ("before", "after")}
    summary["stage0_probe"] = result["stage0_pretrain"].get("probe_after")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

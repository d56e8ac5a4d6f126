"""`agentic-rl replay RUN/batches/step_N`: run one saved training step again and compare it with
what the run logged. For debugging a step that went wrong (a loss spike, a NaN, an advantage
that looks off) without rerunning the rollouts that led to it.

The step runs through the trainer's own code, `loop.train_step`, on the CPU, with one stage
swapped out: the rollout (`collect.rollout`) hands back the bundle's generated episodes
(bundles.py) instead of sampling, batch by batch, after checking that the step chose the same
tasks. Everything after it is the trainer's: reward shaping and batch filters (`collect`,
shaping.py), the batch and its advantages (`prepare_batch`), the update (`learner.update`) and
the step's metrics. The policy (and critic, and warm-started reference) are loaded from the
checkpoint of step N - 1, the weights step N sampled with and updated from; so a step replays
only where that checkpoint exists: train with trainer.save_batches=true, trainer.save_every=1
and trainer.keep_last=0 to replay any step. The optimizer state is loaded from it too where it
has one (trainer.save_batches keeps it in every checkpoint); only updates of several optimizer
steps (algo.ppo_mini_batches, algo.epochs) need it, the first optimizer step's loss and gradient
do not.

Compared: the advantages and loss mask of every trained token (exactly), and every logged
metric of the step but those of the rollout itself, timings and tool-infrastructure retries
(to `rtol`). On the machine and thread count of the run the
numbers are the same; elsewhere (another CPU, a GPU run replayed on a CPU) expect rounding
differences in the loss and gradient norm.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from agentic_rl.backends.base import sync_weights
from agentic_rl.checkpoint.io import load_checkpoint
from agentic_rl.checkpoint.layout import COMPLETE_MARKER, OPTIMIZER_FILE
from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import Episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train import collect as collect_module
from agentic_rl.train.bundles import (
    BATCHES_DIRNAME,
    Bundle,
    BundleError,
    StepRecorder,
    batch_rows,
    bundle_dir,
    code_version,
    read_bundle,
)
from agentic_rl.train.loop import checkpoint_modules, train_step
from agentic_rl.train.setup import build, make_optimizer, set_learning_rate
from agentic_rl.types import Task

_NOT_REPLAYED = ("seconds", "tokens_per_s", "infra_", "reused_prompt_tokens")
"""Metrics of the rollout itself (timings, tool-infrastructure retries, the generator's KV
reuse, which depends on what its store held), not replayed."""


@dataclass
class ReplayResult:
    """A replayed step next to its logged metrics."""

    step: int
    logged: dict[str, float]
    replayed: dict[str, float]
    mismatched: list[str]  # metric names outside the tolerance
    advantages_equal: bool
    rows: int  # trained sequences in the batch
    tokens: int  # trained tokens
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.advantages_equal and not self.mismatched


def replay_config(data: dict[str, Any]) -> Config:
    """The run's resolved config, moved to the CPU: the HF generator (nothing is sampled, but
    the setup holds one), the learner on the CPU, no Ray. Not validated again: it was at load."""
    cfg = build_dataclass(Config, data)
    cfg.trainer.device = "cpu"
    cfg.rollout.backend = "hf"
    cfg.ray.enabled = False
    cfg.trainer.progress = False
    return cfg


@contextmanager
def replayed_rollouts(bundle: Bundle) -> Iterator[None]:
    """Within it, `collect` gets the bundle's generated episodes instead of sampling: each
    rollout batch it asks for takes the next episodes of the tasks it chose, which must be the
    bundle's next ones (the task choice is seeded by the step)."""
    episode_tasks: list[str] = bundle.data["episode_tasks"]
    position = 0

    def rollout(setup: Any, tasks: list[Task], *args: Any, **kwargs: Any) -> Episodes:
        nonlocal position
        chosen = {task.task_id: task for task in tasks}
        start = position
        while position < len(episode_tasks) and episode_tasks[position] in chosen:
            position += 1
        if position == start:
            upcoming = episode_tasks[start : start + 3] or ["nothing"]
            raise BundleError(
                f"step {bundle.step} chose the tasks {sorted(chosen)[:3]}... but the bundle's "
                f"next episodes are of {upcoming}: the training tasks differ from the run's "
                "(changed env data, env.num_train_tasks or trainer.seed?)"
            )
        taken = range(start, position)
        return Episodes(
            [bundle.samples[i] for i in taken], [chosen[episode_tasks[i]] for i in taken]
        )

    with mock.patch.object(collect_module, "rollout", rollout):
        yield
    if position != len(episode_tasks):
        raise BundleError(
            f"the replayed step used {position} of the bundle's {len(episode_tasks)} episodes: "
            "its batch filters decided differently than the run's"
        )


def logged_metrics(bundle: Bundle) -> dict[str, float]:
    """The step's metrics as RUN/metrics.jsonl logged them (the bundle's copy without it)."""
    metrics_file = bundle.run / "metrics.jsonl"
    if metrics_file.is_file():
        for record in read_metrics(metrics_file):
            if record.get("step") == bundle.step and "train/loss" in record:
                return {k[len("train/") :]: v for k, v in record.items() if k.startswith("train/")}
    return dict(bundle.data["metrics"])


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    if a is None or b is None:  # a non-finite value is logged as null
        return a is None and (b is None or not math.isfinite(b))
    return math.isclose(float(a), float(b), rel_tol=rtol, abs_tol=atol) or (
        math.isnan(float(a)) and math.isnan(float(b))
    )


def replay_step(path: Path, rtol: float = 1e-5, atol: float = 1e-8) -> ReplayResult:
    """Replay the bundle at `path` (module docstring) and compare it with the logged step."""
    bundle = read_bundle(path)
    step = bundle.step
    weights = bundle.weights
    if not (weights / COMPLETE_MARKER).is_file():
        raise BundleError(
            f"step {step} started from the weights of checkpoint {weights}, which is not on disk "
            "(pruned, or never saved): replay needs the checkpoint of the step before; train "
            "with trainer.save_batches=true trainer.save_every=1 trainer.keep_last=0 to replay "
            "any step"
        )
    cfg = replay_config(bundle.data["config"])
    setup = build(cfg)
    optimizer = make_optimizer(setup)
    has_optimizer = (weights / OPTIMIZER_FILE).is_file()
    load_checkpoint(
        weights,
        setup.policy,
        optimizer if has_optimizer else None,
        extra_modules=checkpoint_modules(setup),
        restore_rng=False,
    )
    sync_weights(setup.generator, setup.policy)
    set_learning_rate(optimizer, cfg, step)
    recorder = StepRecorder()
    with replayed_rollouts(bundle):
        replayed = train_step(setup, optimizer, step, collect_module.collect, None, recorder)
    logged = logged_metrics(bundle)
    names = sorted(k for k in set(logged) & set(replayed) if not any(t in k for t in _NOT_REPLAYED))
    mismatched = [k for k in names if not _close(logged[k], replayed[k], rtol, atol)]
    notes = []
    recorded_code, now = bundle.data.get("code", {}), code_version()
    if recorded_code.get("git_commit") != now.get("git_commit"):
        notes.append(
            f"recorded with code {recorded_code.get('git_commit')}, replayed with "
            f"{now.get('git_commit')}: differences may come from the code"
        )
    if not has_optimizer and replayed.get("optimizer_steps", 0) > 1:
        notes.append(
            f"{weights.name} has no optimizer state: the update's optimizer steps after the "
            "first ran on fresh AdamW moments (train with trainer.save_batches=true to keep it)"
        )
    equal, rows, tokens = _compare_batch(bundle, recorder)
    return ReplayResult(
        step=step,
        logged={k: logged[k] for k in names},
        replayed={k: replayed[k] for k in names},
        mismatched=mismatched,
        advantages_equal=equal,
        rows=rows,
        tokens=tokens,
        notes=notes,
    )


def _compare_batch(bundle: Bundle, recorder: StepRecorder) -> tuple[bool, int, int]:
    """(advantages and loss masks identical, rows, trained tokens)."""
    if recorder.batch is None:
        return not bundle.advantages, 0, 0
    advantages, masks = batch_rows(recorder.batch)
    same = len(advantages) == len(bundle.advantages) and all(
        torch.equal(a, b) and torch.equal(m, n)
        for a, b, m, n in zip(advantages, bundle.advantages, masks, bundle.loss_masks, strict=True)
    )
    return same, len(advantages), int(sum(float(m.sum()) for m in masks))


def format_result(result: ReplayResult, rtol: float) -> str:
    """The comparison as a table, for the terminal."""
    adv = "identical" if result.advantages_equal else "DIFFERENT"
    lines = [
        f"step {result.step}: advantages and loss mask {adv} "
        f"({result.tokens} trained tokens in {result.rows} sequences)",
        f"{'metric':28s} {'logged':>14s} {'replayed':>14s}",
    ]
    for name in result.logged:
        flag = "  <- differs" if name in result.mismatched else ""
        lines.append(
            f"{name:28s} {_fmt(result.logged[name]):>14s} {_fmt(result.replayed[name]):>14s}{flag}"
        )
    lines += [f"note: {note}" for note in result.notes]
    verdict = "match" if result.ok else "DIFFER"
    lines.append(f"{verdict}: {len(result.logged)} metrics compared (rtol={rtol:g})")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return "null" if value is None else f"{float(value):.8g}"


def replay_command(args: argparse.Namespace) -> int:
    """`agentic-rl replay BUNDLE [--step N] [--rtol R]`: 0 when the step matches, else 1."""
    path = Path(args.bundle)
    if args.step is not None:
        path = bundle_dir(path, args.step)
    elif (path / BATCHES_DIRNAME).is_dir():
        steps = sorted(p.name for p in (path / BATCHES_DIRNAME).glob("step_*"))
        raise BundleError(
            f"{path} is a run directory: name a step with --step N "
            f"(bundles: {', '.join(steps[:5]) or 'none'}{' ...' if len(steps) > 5 else ''})"
        )
    result = replay_step(path, rtol=args.rtol)
    print(format_result(result, args.rtol))
    return 0 if result.ok else 1

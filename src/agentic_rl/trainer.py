"""The training loop, top to bottom:

    setup -> [warm start] -> eval before -> for each step:
        rollout (B tasks x G samples, multi-turn) -> rewards -> advantages -> update -> log
        -> checkpoint -> eval every k
    -> eval after -> summary.json

Every random choice of step `s` is seeded from (trainer.seed, s), so a run resumed from a
checkpoint reproduces the numbers of an uninterrupted run on CPU.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from agentic_rl.config import Config
from agentic_rl.envs import TASKS, make_env
from agentic_rl.learner import collate, compute_advantages, forward_no_grad, update
from agentic_rl.logging import RunLogger
from agentic_rl.models import ValueHead, frozen_copy, load_policy
from agentic_rl.rollout.chat import ChatFormat, check_prefix_preserving, make_chat_format
from agentic_rl.rollout.loop import expert_actor, policy_actor, run_episodes
from agentic_rl.sft import train_sft
from agentic_rl.types import Task, Trajectory


@dataclass
class Setup:
    """Everything a run holds: models, tokenizer, generator, tasks, chat format."""

    cfg: Config
    policy: nn.Module
    tokenizer: Any
    generator: HFGenerator
    fmt: ChatFormat
    train_tasks: list[Task]
    eval_tasks: list[Task]
    reference: nn.Module | None = None
    value_head: nn.Module | None = None


def env_kwargs(cfg: Config) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "format_penalty": cfg.env.format_penalty,
        "tool_timeout_s": cfg.env.tool_timeout_s,
    }
    if cfg.env.name == "search_qa":
        kwargs["corpus_seed"] = cfg.env.seed
        kwargs["topk"] = cfg.env.topk
    return kwargs


def make_envs(cfg: Config, n: int) -> list[Any]:
    return [make_env(cfg.env.name, **env_kwargs(cfg)) for _ in range(n)]


def build(cfg: Config) -> Setup:
    torch.manual_seed(cfg.trainer.seed)
    policy, tokenizer = load_policy(cfg.model, seed=cfg.trainer.seed)
    check_prefix_preserving(tokenizer)
    tools = make_envs(cfg, 1)[0].tools
    make_tasks = TASKS[cfg.env.name]
    setup = Setup(
        cfg=cfg,
        policy=policy,
        tokenizer=tokenizer,
        generator=HFGenerator(
            policy,
            tokenizer,
            max_batch_size=max(cfg.rollout.eval_batch_size, cfg.rollout.group_size),
        ),
        fmt=make_chat_format(cfg.rollout.chat_format, tools, tokenizer),
        train_tasks=make_tasks("train", cfg.env.num_train_tasks, cfg.env.seed),
        eval_tasks=make_tasks("eval", cfg.env.num_eval_tasks, cfg.env.seed),
    )
    if cfg.algo.kl_coef > 0:
        setup.reference = frozen_copy(policy)
    if cfg.algo.name == "ppo":
        setup.value_head = ValueHead(policy.config.hidden_size)
    return setup


def rollout(setup: Setup, step: int) -> list[Trajectory]:
    """B tasks x G samples for training step `step` (task choice seeded by the step)."""
    cfg = setup.cfg.rollout
    rng = random.Random(setup.cfg.trainer.seed * 1_000_003 + step)
    chosen = rng.sample(setup.train_tasks, min(cfg.tasks_per_step, len(setup.train_tasks)))
    tasks = [task for task in chosen for _ in range(cfg.group_size)]
    groups = [f"{step}:{task.task_id}" for task in tasks]
    seed = setup.cfg.trainer.seed * 100_000 + step
    act = policy_actor(setup.generator, setup.fmt, cfg, seed=seed)
    envs = make_envs(setup.cfg, len(tasks))
    return run_episodes(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)


def evaluate(setup: Setup, tasks: list[Task] | None = None) -> dict[str, float]:
    """Greedy episodes on the held-out tasks: success rate, tool use, reward."""
    tasks = tasks if tasks is not None else setup.eval_tasks
    cfg = setup.cfg.rollout
    trajectories: list[Trajectory] = []
    for start in range(0, len(tasks), cfg.eval_batch_size):
        chunk = tasks[start : start + cfg.eval_batch_size]
        act = policy_actor(setup.generator, setup.fmt, cfg, seed=0, greedy=True)
        groups = [f"eval:{t.task_id}" for t in chunk]
        trajectories += run_episodes(
            make_envs(setup.cfg, len(chunk)),
            chunk,
            groups,
            act,
            setup.fmt,
            setup.tokenizer,
            cfg,
            seed=0,
        )
    return summarize(trajectories)


def summarize(trajectories: list[Trajectory]) -> dict[str, float]:
    n = max(len(trajectories), 1)
    mean = lambda key: sum(t.metrics[key] for t in trajectories) / n  # noqa: E731
    return {
        "success": mean("success"),
        "reward": sum(t.reward for t in trajectories) / n,
        "tool_calls_per_episode": mean("tool_calls"),
        "invalid_actions_per_episode": mean("invalid_actions"),
        "turns": mean("turns"),
        "response_tokens": mean("response_tokens"),
        "episodes": float(len(trajectories)),
    }


def warm_start(setup: Setup, logger: RunLogger) -> dict[str, float]:
    """Supervised warm start on scripted-expert episodes of training tasks."""
    cfg = setup.cfg
    rng = random.Random(cfg.trainer.seed + 17)
    tasks = [rng.choice(setup.train_tasks) for _ in range(cfg.warm_start.num_tasks)]
    envs = make_envs(cfg, len(tasks))
    act = expert_actor(setup.fmt, setup.tokenizer)
    groups = [f"expert:{i}" for i in range(len(tasks))]
    demos = run_episodes(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg.rollout, 0)
    demos = [d for d in demos if d.metrics["success"] >= 1.0]
    print(f"warm start: {len(demos)} expert episodes (of {len(tasks)}) ...", flush=True)

    def on_step(step: int, total: int, loss: float) -> None:
        if step % 10 == 0 or step == total:
            print(f"  warm start step {step}/{total} loss={loss:.3f}", flush=True)

    result = train_sft(
        setup.policy,
        demos,
        setup.tokenizer.pad_token_id,
        epochs=cfg.warm_start.epochs,
        lr=cfg.warm_start.lr,
        batch_size=cfg.warm_start.batch_size,
        chunk_size=cfg.model.logprob_chunk_size,
        seed=cfg.trainer.seed,
        on_step=on_step,
    )
    logger.log(0, {**result, "episodes": float(len(demos))}, prefix="warm_start")
    return result


def train_step(setup: Setup, optimizer: torch.optim.Optimizer, step: int) -> dict[str, float]:
    """One RL step: rollout, rewards, advantages, update. Returns the step's metrics."""
    cfg = setup.cfg
    t0 = time.perf_counter()
    trajectories = rollout(setup, step)
    t_rollout = time.perf_counter() - t0
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    chunk, micro = cfg.model.logprob_chunk_size, cfg.optim.micro_batch_size
    if setup.reference is not None:
        batch.ref_logprobs, _ = forward_no_grad(setup.reference, batch, chunk, micro)
    if setup.value_head is not None:
        _, batch.old_values = forward_no_grad(setup.policy, batch, chunk, micro, setup.value_head)
    compute_advantages(batch, cfg.algo)
    assert batch.advantages is not None
    # A batch whose advantages are all zero (every group all-correct or all-wrong) carries no
    # policy gradient; without KL or entropy terms the update would only move Adam's moments.
    useless = (
        bool((batch.advantages == 0).all())
        and setup.reference is None
        and cfg.algo.entropy_coef == 0
        and setup.value_head is None
    )
    update_metrics = (
        {} if useless else update(setup.policy, optimizer, batch, cfg, setup.value_head)
    )
    elapsed = time.perf_counter() - t0
    generated = sum(t.num_generated for t in trajectories)
    metrics = summarize(trajectories)
    metrics.update(update_metrics)
    metrics.update(
        {
            "reward_std": float(batch.rewards.std()) if len(batch) > 1 else 0.0,
            "zero_variance_groups": _zero_variance_fraction(trajectories),
            "tool_errors_per_episode": sum(t.metrics["tool_errors"] for t in trajectories)
            / len(trajectories),
            "truncated": sum(t.metrics["truncated"] for t in trajectories) / len(trajectories),
            "skipped_update": float(useless),
            "lr": optimizer.param_groups[0]["lr"],
            "rollout_seconds": t_rollout,
            "step_seconds": elapsed,
            "tokens_per_s": generated / max(t_rollout, 1e-9),
        }
    )
    return metrics


def _zero_variance_fraction(trajectories: list[Trajectory]) -> float:
    groups: dict[str, list[float]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t.reward)
    flat = [g for g in groups.values() if max(g) - min(g) <= 1e-6]
    return len(flat) / max(len(groups), 1)


def make_optimizer(setup: Setup) -> torch.optim.Optimizer:
    cfg = setup.cfg.optim
    params = [p for p in setup.policy.parameters() if p.requires_grad]
    if setup.value_head is not None:
        params += list(setup.value_head.parameters())
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay
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


def train(cfg: Config) -> dict[str, Any]:
    """Run a recipe end to end; returns (and writes) the summary."""
    wall_start = time.time()
    setup = build(cfg)  # fails on a missing model before anything is written
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    optimizer = make_optimizer(setup)
    extra = {"value_head": setup.value_head} if setup.value_head is not None else None
    state: dict[str, Any] = {"step": 0, "evals": {}}
    last = latest_checkpoint(out) if cfg.trainer.resume else None
    if last is not None:
        state = load_checkpoint(last, setup.policy, optimizer, extra_modules=extra)
        print(f"resuming from {last} (step {state['step']})", flush=True)
    with RunLogger(
        out,
        cfg.trainer.steps,
        tensorboard=cfg.trainer.tensorboard,
        progress=cfg.trainer.progress,
        resume_step=state["step"] if last is not None else None,
    ) as logger:
        if last is None:
            _before_rl(setup, logger, state)
            save_checkpoint(
                out, 0, setup.policy, optimizer, None, state, extra, keep_last=cfg.trainer.keep_last
            )
        rl_start = time.time()
        step = state["step"]
        while step < cfg.trainer.steps:
            step += 1
            set_learning_rate(optimizer, cfg, step)
            metrics = train_step(setup, optimizer, step)
            logger.log(step, metrics)
            state["step"] = step
            out_of_time = cfg.trainer.max_minutes > 0 and (
                time.time() - rl_start > cfg.trainer.max_minutes * 60
            )
            if cfg.trainer.eval_every and step % cfg.trainer.eval_every == 0:
                state["evals"][f"step_{step}"] = _eval_and_log(setup, logger, step)
            if step % cfg.trainer.save_every == 0 or step == cfg.trainer.steps or out_of_time:
                save_checkpoint(
                    out,
                    step,
                    setup.policy,
                    optimizer,
                    None,
                    state,
                    extra,
                    keep_last=cfg.trainer.keep_last,
                )
            if out_of_time:
                print(f"time budget of {cfg.trainer.max_minutes} min reached at step {step}")
                break
        state["evals"]["after"] = _eval_and_log(setup, logger, step)
    summary = _summary(cfg, state, step, time.time() - wall_start)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print_table(summary)
    return summary


def _before_rl(setup: Setup, logger: RunLogger, state: dict[str, Any]) -> None:
    cfg = setup.cfg
    if cfg.trainer.eval_before:
        state["evals"]["before"] = _eval_and_log(setup, logger, 0, "eval_before")
    if cfg.warm_start.num_tasks > 0:
        warm_start(setup, logger)
        if cfg.trainer.eval_before:
            state["evals"]["warm_start"] = _eval_and_log(setup, logger, 0, "eval_warm_start")


def _eval_and_log(setup: Setup, logger: RunLogger, step: int, prefix: str = "eval") -> dict:
    t0 = time.perf_counter()
    result = evaluate(setup)
    result["seconds"] = time.perf_counter() - t0
    logger.log(step, result, prefix=prefix)
    return result


def _summary(cfg: Config, state: dict[str, Any], step: int, seconds: float) -> dict[str, Any]:
    evals = state["evals"]
    pick = lambda e: {  # noqa: E731
        k: e[k]
        for k in ("success", "tool_calls_per_episode", "reward", "invalid_actions_per_episode")
    }
    summary: dict[str, Any] = {
        "recipe": cfg.recipe,
        "model": cfg.model.name,
        "env": cfg.env.name,
        "algo": cfg.algo.name,
        "steps": step,
        "eval_tasks": cfg.env.num_eval_tasks,
        "after": pick(evals["after"]),
        "wall_seconds": round(seconds, 1),
    }
    if "before" in evals:
        summary["before"] = pick(evals["before"])
    if "warm_start" in evals:
        summary["warm_start"] = pick(evals["warm_start"])
    return summary


def print_table(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary['recipe']}: {summary['eval_tasks']} held-out tasks, greedy")
    for col in ("stage", "success", "tool calls / episode", "reward", "invalid actions / ep."):
        table.add_column(col)
    for stage in ("before", "warm_start", "after"):
        if stage in summary:
            row = summary[stage]
            table.add_row(
                stage.replace("_", " "),
                f"{row['success']:.1%}",
                f"{row['tool_calls_per_episode']:.2f}",
                f"{row['reward']:.3f}",
                f"{row['invalid_actions_per_episode']:.2f}",
            )
    Console().print(table)
    print(f"wall time {summary['wall_seconds']:.0f} s, {summary['steps']} RL steps")

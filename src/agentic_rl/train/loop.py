"""The training loop, top to bottom:

    setup -> [warm start] -> eval before -> for each step:
        collect: rollout (B tasks x G samples, multi-turn or step-wise) -> reward shaping
                 -> batch filters (more rollout batches while dynamic sampling is short)
        -> advantages -> update -> log -> checkpoint -> eval every k
    -> eval after -> summary.json

Every random choice of step `s` is seeded from (trainer.seed, s), so a run resumed from a
checkpoint reproduces the numbers of an uninterrupted run on CPU.

The `Setup` a run holds, its optimizer and learning-rate schedule are in trainer_setup.py, the
episodes -> training batch step (`prepare_batch`) in trainer_batch.py; both are re-exported here.
Everything that makes envs or actors (`build`, `play`, `rollout`, `evaluate`, ...) stays here.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.base import make_generator, release_for_update, sync_weights
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import latest_checkpoint
from agentic_rl.config.load import Config
from agentic_rl.envs.from_config import make_envs, make_tasks
from agentic_rl.learner.update import update as learner_update
from agentic_rl.logging import RunLogger
from agentic_rl.model.load import ValueHead, frozen_copy, load_policy
from agentic_rl.model.lora import is_lora
from agentic_rl.rollout.budgeted import run_budgeted_episodes
from agentic_rl.rollout.formats.chat import check_prefix_preserving, make_chat_format
from agentic_rl.rollout.loop import Actor, expert_actor, policy_actor, run_episodes
from agentic_rl.rollout.stepwise import run_stepwise
from agentic_rl.scale.async_rollout import CollectFn, rollout_source
from agentic_rl.train import shaping as bf
from agentic_rl.train.batch import carries_gradient, prepare_batch
from agentic_rl.train.self_play import self_play_step
from agentic_rl.train.setup import Setup, make_optimizer, run_dir, set_learning_rate
from agentic_rl.train.sft import save_model, sft_precision, train_sft
from agentic_rl.train.shaping import Episodes
from agentic_rl.train.summary import advantage_metrics, print_table, run_summary, summarize
from agentic_rl.types import Task, Trajectory


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling could not fill a batch within filters.max_gen_batches rollouts."""


def build(cfg: Config) -> Setup:
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
        from agentic_rl.scale.ray_pool import attach_ray

        attach_ray(setup)
    return setup


def play(
    setup: Setup,
    tasks: list[Task],
    groups: list[str],
    act: Actor,
    seed: int,
    progress: float | None = None,
) -> list[list[Trajectory]]:
    """Run one episode per task in the configured rollout mode; samples per episode.
    `progress` (fraction of RL done) reaches envs that take it; None = the env's default."""
    if setup.dp is not None:  # fsdp2: this process plays its share, every process gets all
        here = replace(setup, dp=None)
        return setup.dp.play(lambda t, g: play(here, t, g, act, seed, progress), tasks, groups)
    cfg = setup.cfg.rollout
    envs = make_envs(setup.cfg, len(tasks), progress, pool=setup.env_pool)
    if cfg.mode == "step":
        return run_stepwise(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    if cfg.context_budget:  # long horizons: segments, each turn in the context it saw
        return run_budgeted_episodes(
            envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed
        )
    trajectories = run_episodes(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    return [[t] for t in trajectories]


def rollout(setup: Setup, tasks: list[Task], group_size: int, seed: int, step: int) -> Episodes:
    """`group_size` sampled episodes of each task; the episodes of a task form a group."""
    expanded = [task for task in tasks for _ in range(group_size)]
    groups = [f"{step}:{task.task_id}" for task in expanded]
    act = policy_actor(
        setup.generator, setup.fmt, setup.cfg.rollout, seed=seed, tokenizer=setup.tokenizer
    )
    progress = min(1.0, (step - 1) / max(setup.cfg.trainer.steps, 1))
    return Episodes(play(setup, expanded, groups, act, seed, progress), expanded)


def collect(setup: Setup, step: int) -> tuple[Episodes, Episodes, dict[str, float]]:
    """The episodes to train on at `step`, the episodes generated, and the filter metrics.

    One rollout batch of B tasks x G samples, unless dynamic sampling drops groups: then more
    batches of fresh tasks (never a task twice in a step) until B groups are kept, and an error
    after filters.max_gen_batches. Task choice and sampling are seeded by (trainer.seed, step)."""
    cfg, f = setup.cfg, setup.cfg.filters
    if cfg.env.name == "code_self_play":  # Absolute Zero: propose, validate, estimate, solve
        return self_play_step(setup, step, rollout, run_dir(cfg) / "task_buffer.jsonl")
    want = cfg.rollout.tasks_per_step
    rng = random.Random(cfg.trainer.seed * 1_000_003 + step)
    remaining = list(setup.train_tasks)
    group_size = cfg.rollout.group_size * (f.roc_oversample if f.roc else 1)
    group_size = f.ttrl_vote_samples or group_size
    kept, generated = Episodes(), Episodes()
    per_batch: list[dict[str, float]] = []  # shaping / filter metrics of each rollout batch
    gen = 0
    while gen < (f.max_gen_batches if f.dynamic_sampling else 1) and remaining:
        chosen = rng.sample(remaining, min(want, len(remaining)))
        taken = {id(task) for task in chosen}
        remaining = [task for task in remaining if id(task) not in taken]
        seed = cfg.trainer.seed * 100_000 + step + gen * 1_000_003
        episodes = rollout(setup, chosen, group_size, seed, step)
        gen += 1
        trainable, batch_metrics = episodes, {}
        if f.ttrl_vote_samples:  # vote on all N, train on M of them
            trainable, vote_metrics = bf.ttrl_relabel(
                episodes, cfg.rollout.group_size, setup.tokenizer
            )
            batch_metrics.update(vote_metrics)
        if f.overlong_buffer:  # in place, so `trainable` (the same samples) sees it too
            max_len = cfg.rollout.max_total_tokens
            batch_metrics.update(bf.overlong_penalty(episodes, max_len, f.overlong_buffer))
        generated.extend(episodes)
        episodes = trainable
        if f.roc:
            episodes, roc_metrics = bf.roc_select(
                episodes, cfg.rollout.group_size, f.roc_min_per_class
            )
            batch_metrics.update(roc_metrics)
        per_batch.append(batch_metrics)
        if f.dynamic_sampling and not f.roc:
            episodes = bf.drop_constant_groups(episodes)
        kept.extend(episodes)
        if len(kept.groups()) >= want:
            break
    if f.dynamic_sampling:
        if len(kept.groups()) < want:
            raise DynamicSamplingError(
                f"dynamic sampling kept {len(kept.groups())} of the {want} groups a batch needs "
                f"after {gen} rollout batches (filters.max_gen_batches={f.max_gen_batches}"
                f"{'; every training task was used' if not remaining else ''}; "
                f"{len(generated.groups())} groups generated, the rest had equal rewards, all "
                "correct or all wrong): the tasks are too easy or too hard for this model. Raise "
                "filters.max_gen_batches, change the tasks, or set filters.dynamic_sampling=false"
            )
        kept = kept.first_groups(want)
    kept = bf.variance_keep(kept, f.variance_filter_keep)
    keys = {key for m in per_batch for key in m}
    metrics = {k: sum(m[k] for m in per_batch if k in m) / len(per_batch) for k in keys}
    metrics.update(
        {
            "gen_batches": float(gen),
            "generated_groups": float(len(generated.groups())),
            "kept_groups": float(len(kept.groups())),
            "zero_variance_groups": bf.zero_variance_fraction(generated),
        }
    )
    return kept, generated, metrics


def evaluate(setup: Setup, tasks: list[Task] | None = None) -> dict[str, float]:
    """Greedy episodes on the held-out tasks: success rate, tool use, reward."""
    tasks = tasks if tasks is not None else setup.eval_tasks
    cfg = setup.cfg.rollout
    episodes: list[list[Trajectory]] = []
    for start in range(0, len(tasks), cfg.eval_batch_size):
        chunk = tasks[start : start + cfg.eval_batch_size]
        act = policy_actor(
            setup.generator, setup.fmt, cfg, seed=0, greedy=True, tokenizer=setup.tokenizer
        )
        episodes += play(setup, chunk, [f"eval:{t.task_id}" for t in chunk], act, seed=0)
    return summarize([samples[0] for samples in episodes])


def expert_demos(setup: Setup, num_tasks: int) -> tuple[list[Trajectory], int]:
    """Scripted-expert samples of `num_tasks` training tasks (successful episodes only; in step
    mode their step samples, so the model learns in the contexts it will act in) and the
    number of successful episodes."""
    rng = random.Random(setup.cfg.trainer.seed + 17)
    tasks = [rng.choice(setup.train_tasks) for _ in range(num_tasks)]
    act = expert_actor(setup.fmt, setup.tokenizer)
    episodes = play(setup, tasks, [f"expert:{i}" for i in range(len(tasks))], act, seed=0)
    demos = [samples for samples in episodes if samples[0].metrics["success"] >= 1.0]
    return [sample for samples in demos for sample in samples], len(demos)


def warm_start(setup: Setup, logger: RunLogger) -> dict[str, float]:
    """Supervised warm start on scripted-expert episodes of training tasks."""
    cfg = setup.cfg
    demos, num_episodes = expert_demos(setup, cfg.warm_start.num_tasks)
    print(
        f"warm start: {num_episodes} expert episodes (of {cfg.warm_start.num_tasks}) ...",
        flush=True,
    )

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
        micro_batch_size=cfg.optim.micro_batch_size,
        mixed_precision=sft_precision(cfg),
    )
    logger.log(0, {**result, "episodes": float(num_episodes)}, prefix="warm_start")
    return result


def train_step(
    setup: Setup, optimizer: torch.optim.Optimizer, step: int, collect_fn: CollectFn = collect
) -> dict[str, float]:
    """One RL step: collect (rollout + filters), advantages, update. Returns the metrics."""
    cfg = setup.cfg
    t0 = time.perf_counter()
    episodes, generated, filter_metrics = collect_fn(setup, step)
    t_rollout = time.perf_counter() - t0
    release_for_update(setup.generator)  # vLLM sleep mode: the GPU is the learner's meanwhile
    batch = prepare_batch(setup, episodes) if len(episodes) else None
    useless = not carries_gradient(setup, batch)
    update_metrics = {}
    if not useless:
        assert batch is not None
        update_metrics = learner_update(
            setup.policy, optimizer, batch, cfg, setup.value_head, setup.dp
        )
    sync_weights(setup.generator, setup.policy, updated=not useless)
    elapsed = time.perf_counter() - t0
    reps = [samples[0] for samples in generated.samples]  # one per generated episode
    generated_tokens = sum(s.num_generated for samples in generated.samples for s in samples)
    rewards = generated.rewards()
    metrics = summarize(reps)
    metrics.update(update_metrics)
    metrics.update(filter_metrics)
    batch_metrics = {"samples": 0.0} if batch is None else advantage_metrics(batch, cfg.gigpo.norm)
    metrics.update(batch_metrics)
    metrics.update(
        {
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "tool_errors_per_episode": sum(t.metrics["tool_errors"] for t in reps) / len(reps),
            "truncated": sum(t.metrics["truncated"] for t in reps) / len(reps),
            "skipped_update": float(useless),
            "lr": optimizer.param_groups[0]["lr"],
            "rollout_seconds": t_rollout,
            "step_seconds": elapsed,
            "tokens_per_s": generated_tokens / max(t_rollout, 1e-9),
        }
    )
    return metrics


def train(cfg: Config) -> dict[str, Any]:
    """Run a recipe end to end; returns (and writes) the summary."""
    if cfg.stages:
        from agentic_rl.train.stages import train_pipeline

        return train_pipeline(cfg)
    wall_start = time.time()
    setup = build(cfg)  # fails on a missing model before anything is written
    save, load = save_checkpoint, load_checkpoint
    if cfg.learner.strategy == "fsdp2":  # under torchrun: shard the models over the processes
        from agentic_rl.scale.fsdp import shard_setup

        dp = shard_setup(setup)
        save, load = dp.save_checkpoint, dp.load_checkpoint
    main = setup.dp is None or setup.dp.is_main
    out = run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    optimizer = make_optimizer(setup)
    extra: dict[str, nn.Module] = {}
    if setup.value_head is not None:
        extra["value_head"] = setup.value_head
    if setup.reference is not None and cfg.warm_start.num_tasks > 0:
        extra["reference"] = setup.reference  # the warm-started weights: not rebuildable
    state: dict[str, Any] = {"step": 0, "evals": {}}
    last = latest_checkpoint(out) if cfg.trainer.resume else None
    if last is not None:
        state = load(last, setup.policy, optimizer, extra_modules=extra)
        sync_weights(setup.generator, setup.policy)
        print(f"resuming from {last} (step {state['step']})", flush=True)
    with (
        RunLogger(
            out if main else out / f"rank_{setup.dp.rank}",  # other processes: their own log
            cfg.trainer.steps,
            tensorboard=cfg.trainer.tensorboard,
            progress=cfg.trainer.progress,
            resume_step=state["step"] if last is not None else None,
        ) as logger,
        rollout_source(setup, collect) as collect_fn,  # the async worker, the Ray env pool
    ):
        if last is None:
            _before_rl(setup, logger, state)
            save(
                out, 0, setup.policy, optimizer, None, state, extra, keep_last=cfg.trainer.keep_last
            )
        rl_start = time.time()
        step = state["step"]
        while step < cfg.trainer.steps:
            step += 1
            set_learning_rate(optimizer, cfg, step)
            metrics = train_step(setup, optimizer, step, collect_fn)
            logger.log(step, metrics)
            state["step"] = step
            out_of_time = cfg.trainer.max_minutes > 0 and (
                time.time() - rl_start > cfg.trainer.max_minutes * 60
            )
            if cfg.trainer.eval_every and step % cfg.trainer.eval_every == 0:
                state["evals"][f"step_{step}"] = _eval_and_log(setup, logger, step)
            if step % cfg.trainer.save_every == 0 or step == cfg.trainer.steps or out_of_time:
                save(
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
    if cfg.trainer.export_model and main:  # before summary.json, which marks the run finished
        save_model(setup.dp.full_policy if setup.dp else setup.policy, setup.tokenizer, out)
    summary = run_summary(cfg, state, step, time.time() - wall_start)
    if main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if setup.dp is not None:
        setup.dp.barrier()  # the next stage of a pipeline may read the exported model
    print_table(summary)
    return summary


def _before_rl(setup: Setup, logger: RunLogger, state: dict[str, Any]) -> None:
    cfg = setup.cfg
    if cfg.trainer.eval_before:
        state["evals"]["before"] = _eval_and_log(setup, logger, 0, "eval_before")
    if cfg.warm_start.num_tasks > 0:
        warm_start(setup, logger)
        sync_weights(setup.generator, setup.policy)
        if setup.reference is not None:  # KL to the model RL starts from, not the untrained one
            setup.reference.load_state_dict(setup.policy.state_dict())
        if cfg.trainer.eval_before:
            state["evals"]["warm_start"] = _eval_and_log(setup, logger, 0, "eval_warm_start")


def _eval_and_log(setup: Setup, logger: RunLogger, step: int, prefix: str = "eval") -> dict:
    t0 = time.perf_counter()
    result = evaluate(setup)
    result["seconds"] = time.perf_counter() - t0
    logger.log(step, result, prefix=prefix)
    return result

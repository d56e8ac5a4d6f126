"""The training loop, top to bottom:

    setup -> [warm start] -> eval before -> for each step:
        collect: rollout (B tasks x G samples, multi-turn or step-wise) -> reward shaping
                 -> batch filters (more rollout batches while dynamic sampling is short)
        -> update_policy: advantages -> update -> weight sync
        -> log -> checkpoint -> eval every k
    -> eval after -> summary.json

Every random choice of step `s` is seeded from (trainer.seed, s), so a run resumed from a
checkpoint reproduces the numbers of an uninterrupted run on CPU.

What a run holds (`Setup`, `build`) is in setup.py, playing and collecting episodes in
collect.py, the episodes -> training batch step (`prepare_batch`) in batch.py. Multi-stage recipes
(`cfg.stages`) run through `stages.train_recipe`, which calls `train` once per stage.
`update_policy` is the whole update half of a step; serve-policy (serving/policy_server.py)
trains its served episodes with it too.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from agentic_rl.backends.base import release_for_update, sync_weights
from agentic_rl.checkpoint.export import save_model
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import latest_checkpoint
from agentic_rl.config.checks import check_out_dir
from agentic_rl.config.schema import Config
from agentic_rl.learner.batch import Episodes, TrainBatch
from agentic_rl.learner.update import update as learner_update
from agentic_rl.logging import RunLogger
from agentic_rl.model.roles import as_role, role_policies
from agentic_rl.scale.async_rollout import (
    CollectFn,
    check_stale_correction,
    correct_stale,
    rollout_source,
    staleness_metrics,
)
from agentic_rl.scale.fsdp import shard_setup
from agentic_rl.train.batch import carries_gradient, prepare_batch
from agentic_rl.train.bundles import StepRecorder, write_bundle
from agentic_rl.train.collect import collect, eval_episodes, expert_demos
from agentic_rl.train.distill import distill_batch
from agentic_rl.train.failures import learn_from_failures
from agentic_rl.train.self_play import self_play_step
from agentic_rl.train.setup import (
    Setup,
    build,
    check_resume,
    make_optimizer,
    run_dir,
    set_learning_rate,
    start_from_policy,
    trains_before_rl,
)
from agentic_rl.train.sft import warm_start_sft
from agentic_rl.train.summary import (
    advantage_metrics,
    env_summary_metrics,
    print_table,
    run_summary,
    summarize,
)
from agentic_rl.train.task_select import apply_selection, select_train_tasks
from agentic_rl.train.trajectory_log import StepTrajectories, TrajectoryLog


def warm_start(setup: Setup, logger: RunLogger) -> dict[str, float]:
    """Supervised warm start on scripted-expert episodes of training tasks."""
    cfg = setup.cfg
    demos, num_episodes = expert_demos(setup, cfg.warm_start.num_tasks)
    if not demos:
        raise RuntimeError(
            f"warm start: none of the {cfg.warm_start.num_tasks} scripted-expert episodes reached "
            f"success within rollout.max_turns={cfg.rollout.max_turns} and "
            f"rollout.max_total_tokens={cfg.rollout.max_total_tokens}, so there is nothing to "
            "train on; raise those budgets or warm_start.num_tasks"
        )
    print(
        f"warm start: {num_episodes} expert episodes (of {cfg.warm_start.num_tasks}) ...",
        flush=True,
    )

    def on_step(step: int, total: int, loss: float) -> None:
        if step % 10 == 0 or step == total:
            print(f"  warm start step {step}/{total} loss={loss:.3f}", flush=True)

    roles = role_policies(setup.policy)
    if not roles:
        result = warm_start_sft(cfg, setup.policy, demos, setup.tokenizer.pad_token_id, on_step)
    else:  # model.role_policies: each role's demonstrations train its own adapter or model
        result = {}
        for role in roles:
            mine = [d for d in demos if d.role == role and any(d.loss_mask)]
            if mine:  # (a frozen role's demonstrations carry no trained token)
                with as_role(setup.policy, role) as model:
                    done = warm_start_sft(cfg, model, mine, setup.tokenizer.pad_token_id)
                result.update({f"{role}_{key}": value for key, value in done.items()})
    logger.log(0, {**result, "episodes": float(num_episodes)}, prefix="warm_start")
    return result


def collector(cfg: Config) -> CollectFn:
    """How a step's episodes are gathered (`rollout.scheme`): B tasks x G samples through the
    batch filters, or Absolute Zero's propose / validate / solve self-play."""
    return {"sample": collect, "self_play": self_play_step}[cfg.rollout.scheme]


def update_policy(
    setup: Setup,
    optimizer: torch.optim.Optimizer,
    episodes: Episodes,
    learner_version: int | None = None,
    trajectories: StepTrajectories | None = None,  # the step's sample for the trajectory file
    on_batch: Callable[[TrainBatch | None], None] | None = None,  # the replay bundle's batch
) -> dict[str, float]:
    """Episodes -> one policy update -> the generator on the new weights; returns the metrics.

    The update half of `train_step` and of serve-policy: the generator frees its accelerator
    memory (vLLM sleep mode), the batch is built (`prepare_batch`: reference logprobs, values,
    advantages), the learner updates unless the batch cannot move the weights
    (`carries_gradient`), and the generator is synced. `learner_version` (the number of updates
    the weights have had) is for episodes that record which version sampled each token
    (`Trajectory.token_versions`, serve-policy): when any token is older, the batch is trained
    with decoupled PPO (`correct_stale`), as asynchronous rollouts are, and the staleness
    metrics are added. With distill.teacher the teacher scores the batch and the advantages get
    its per-token reverse KL (`distill_batch`). Metrics: the learner's, `samples`,
    `nonzero_adv_fraction`, `skipped_update`, `distill_*`."""
    cfg = setup.cfg
    release_for_update(setup.generator)  # vLLM sleep mode: the GPU is the learner's meanwhile
    batch = prepare_batch(setup, episodes) if len(episodes) else None
    metrics: dict[str, float] = {}
    if batch is not None and setup.teacher is not None:  # the teacher's per-token reverse KL
        metrics.update(distill_batch(setup, batch))
    if batch is not None and learner_version is not None:
        metrics.update(staleness_metrics(episodes, learner_version))
        if metrics["stale_token_fraction"] > 0:
            check_stale_correction(cfg)
            correct_stale(setup, batch)
    useful = carries_gradient(setup, batch)
    if useful:
        assert batch is not None
        metrics.update(
            learner_update(setup.policy, optimizer, batch, cfg, setup.value_head, setup.dp)
        )
        # The gradients are consumed: free them (policy and critic, each as large as its
        # trainable weights) instead of holding them through the next rollout and evaluation;
        # every update starts with zero_grad, so nothing reads them.
        optimizer.zero_grad(set_to_none=True)
    sync_weights(setup.generator, setup.policy, updated=useful)
    metrics.update({"samples": 0.0} if batch is None else advantage_metrics(batch, cfg.gigpo.norm))
    metrics["skipped_update"] = float(not useful)
    if trajectories is not None:  # with the batch's advantages (and logprobs) of trained samples
        trajectories.write(episodes, batch)
    if on_batch is not None:
        on_batch(batch)
    return metrics


def train_step(
    setup: Setup,
    optimizer: torch.optim.Optimizer,
    step: int,
    collect_fn: CollectFn = collect,
    trajectories: TrajectoryLog | None = None,
    recorder: StepRecorder | None = None,
) -> dict[str, float]:
    """One RL step: collect (rollout + filters), then `update_policy`. Returns the metrics; a
    sample of the episodes goes to `trajectories` (the run's trajectory file), the generated
    and kept episodes and the batch to `recorder` (the replay bundle, trainer.save_batches)."""
    cfg = setup.cfg
    t0 = time.perf_counter()
    episodes, generated, filter_metrics = (collect_fn or collector(cfg))(setup, step)
    t_rollout = time.perf_counter() - t0
    sample = trajectories.step(step, generated) if trajectories is not None else None
    if recorder is not None:
        recorder.episodes(generated, episodes)
    update_metrics = update_policy(
        setup,
        optimizer,
        episodes,
        trajectories=sample,
        on_batch=recorder.set_batch if recorder is not None else None,
    )
    elapsed = time.perf_counter() - t0
    reps = [samples[0] for samples in generated.samples]  # one per generated episode
    generated_tokens = sum(s.num_generated for samples in generated.samples for s in samples)
    rewards = generated.rewards()
    metrics = summarize(reps, env_summary_metrics(setup.cfg))
    metrics.update(filter_metrics)
    metrics.update(update_metrics)
    metrics.update(
        {
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            "tool_errors_per_episode": sum(t.metrics["tool_errors"] for t in reps) / len(reps),
            "truncated": sum(t.metrics["truncated"] for t in reps) / len(reps),
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
        raise ValueError(
            f"{cfg.recipe} has {len(cfg.stages)} stages: run it with "
            "agentic_rl.train.stages.train_recipe (one call of train per stage)"
        )
    wall_start = time.time()
    check_out_dir(cfg.trainer.out_dir)  # a typo fails now, not after the model loaded
    out = run_dir(cfg)
    last = latest_checkpoint(out) if cfg.trainer.resume else None
    if last is not None:  # refuse to continue another experiment (unless trainer.resume=force)
        check_resume(out, last, cfg)
    setup = build(cfg)  # fails on a missing model before anything is written
    save, load = save_checkpoint, load_checkpoint
    if cfg.learner.strategy == "fsdp2":  # under torchrun: shard the models over the processes
        dp = shard_setup(setup)
        save, load = dp.save_checkpoint, dp.load_checkpoint
    main = setup.dp is None or setup.dp.is_main
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
    optimizer = make_optimizer(setup)
    extra = checkpoint_modules(setup)
    if cfg.learner.strategy != "fsdp2":  # (sharded checkpoints store it with the weights)
        # Optimizer state (twice the weights) only in the latest checkpoint, which resumes use;
        # replay bundles may start from any, and updates of several optimizer steps need it.
        save = functools.partial(save, keep_all_optimizers=cfg.trainer.save_batches)
    state: dict[str, Any] = {"step": 0, "evals": {}}
    if last is not None:
        state = load(last, setup.policy, optimizer, extra_modules=extra)
        sync_weights(setup.generator, setup.policy)
        print(f"resuming from {last} (step {state['step']})", flush=True)
        if "task_selection" in state:  # env.select_by_variance: the tasks chosen before step 1
            apply_selection(setup, state["task_selection"])
    trajectories = (  # a sample of every step's episodes, token by token, for `agentic-rl report`
        TrajectoryLog(
            out,
            setup.tokenizer,
            setup.fmt,
            cfg.trainer.log_trajectories,
            cfg.trainer.seed,
            resume_step=state["step"] if last is not None else None,
        )
        if main
        else None
    )
    with (
        RunLogger(
            out if main else out / f"rank_{setup.dp.rank}",  # other processes: their own log
            cfg.trainer.steps,
            tensorboard=cfg.trainer.tensorboard,
            progress=cfg.trainer.progress,
            resume_step=state["step"] if last is not None else None,
            wandb=(  # trainer.wandb: the same metrics to Weights & Biases (offline by default)
                {"project": cfg.trainer.wandb_project, "name": out.name, "config": cfg.to_dict()}
                if cfg.trainer.wandb and main
                else None
            ),
        ) as logger,
        rollout_source(setup, collector(cfg)) as collect_fn,  # the async worker, the Ray env pool
    ):
        if last is None:
            _before_rl(setup, logger, state, trajectories)
            save(
                out, 0, setup.policy, optimizer, None, state, extra, keep_last=cfg.trainer.keep_last
            )
        rl_start = time.time()
        step = state["step"]
        while step < cfg.trainer.steps:
            step += 1
            set_learning_rate(optimizer, cfg, step)
            recorder = StepRecorder() if cfg.trainer.save_batches and main else None
            metrics = train_step(setup, optimizer, step, collect_fn, trajectories, recorder)
            logger.log(step, metrics)
            if recorder is not None:  # the step's data for `agentic-rl replay`
                write_bundle(out, step, cfg, recorder, metrics)
            state["step"] = step
            out_of_time = cfg.trainer.max_minutes > 0 and (
                time.time() - rl_start > cfg.trainer.max_minutes * 60
            )
            if cfg.trainer.eval_every and step % cfg.trainer.eval_every == 0:
                state["evals"][f"step_{step}"] = _eval_and_log(setup, logger, step, trajectories)
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
        # the last step's evaluation (eval_every dividing it) is the final one: greedy on the
        # same weights, so it is not run twice
        last = state["evals"].get(f"step_{step}")
        state["evals"]["after"] = last or _eval_and_log(setup, logger, step, trajectories)
    if cfg.trainer.export_model and main:  # before summary.json, which marks the run finished
        save_model(setup.dp.full_policy if setup.dp else setup.policy, setup.tokenizer, out, cfg)
    summary = run_summary(cfg, state, step, time.time() - wall_start)
    if main:
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if setup.dp is not None:
        setup.dp.barrier()  # the next stage of a pipeline may read the exported model
    print_table(summary)
    return summary


def checkpoint_modules(setup: Setup) -> dict[str, nn.Module]:
    """The modules a checkpoint holds besides the policy: the critic (algo.critic "shared":
    "value_head", else "critic") and, after a warm start, the reference (the warm-started
    weights, which cannot be rebuilt from model.name)."""
    cfg = setup.cfg
    extra: dict[str, nn.Module] = {}
    if setup.value_head is not None:
        extra["value_head" if cfg.algo.critic == "shared" else "critic"] = setup.value_head
    if setup.reference is not None and trains_before_rl(cfg):
        extra["reference"] = setup.reference
    return extra


def _before_rl(
    setup: Setup, logger: RunLogger, state: dict[str, Any], trajectories: TrajectoryLog | None
) -> None:
    cfg = setup.cfg
    if cfg.trainer.eval_before and cfg.trainer.eval_untrained:
        state["evals"]["before"] = _eval_and_log(setup, logger, 0, trajectories, "eval_before")
    if cfg.warm_start.num_tasks > 0:
        warm_start(setup, logger)
        sync_weights(setup.generator, setup.policy)
        # KL to the model RL starts from, not the untrained one; a separate critic starts there too
        start_from_policy(setup)
        if cfg.trainer.eval_before:
            state["evals"]["warm_start"] = _eval_and_log(
                setup, logger, 0, trajectories, "eval_warm_start"
            )
    if cfg.dpo.failure_tasks > 0:  # UI-TARS: DPO on pairs at the first failing step
        learn_from_failures(setup, logger, run_dir(cfg))
        sync_weights(setup.generator, setup.policy)
        start_from_policy(setup)
        if cfg.trainer.eval_before:
            state["evals"]["failure_dpo"] = _eval_and_log(
                setup, logger, 0, trajectories, "eval_failure_dpo"
            )
    if cfg.env.select_by_variance and cfg.trainer.steps > 0:  # 1-shot RLVR (train/task_select.py)
        state["task_selection"] = select_train_tasks(setup, logger)


def _eval_and_log(
    setup: Setup,
    logger: RunLogger,
    step: int,
    trajectories: TrajectoryLog | None = None,
    prefix: str = "eval",
) -> dict:
    t0 = time.perf_counter()
    episodes = eval_episodes(setup)
    result = summarize([samples[0] for samples in episodes], env_summary_metrics(setup.cfg))
    result["seconds"] = time.perf_counter() - t0
    if trajectories is not None:
        trajectories.write_eval(step, prefix, episodes)
    logger.log(step, result, prefix=prefix)
    return result

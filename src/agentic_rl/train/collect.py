"""Collecting episodes: play tasks in the configured rollout mode, sample groups for a training
step through the batch filters (`collect`), greedy evaluation and scripted-expert demonstrations.

`play` is the one place where episodes are run: multi-turn (`rollout/loop.py`), step-wise
(`rollout/stepwise.py`) or with a context budget (`rollout/budgeted.py`), on local envs or a Ray
env pool, and under FSDP2 each process plays its share of the groups (`DataParallel.my_share`)
and every process receives all episodes (`DataParallel.gather_episodes`).
"""

from __future__ import annotations

import random

from agentic_rl.envs.from_config import make_envs
from agentic_rl.learner.batch import Episodes
from agentic_rl.rewards.custom import apply_reward_fn
from agentic_rl.rollout.budgeted import run_budgeted_episodes
from agentic_rl.rollout.loop import Actor, expert_actor, policy_actor, run_episodes
from agentic_rl.rollout.stepwise import run_stepwise
from agentic_rl.train import shaping as bf
from agentic_rl.train.setup import Setup
from agentic_rl.train.summary import summarize
from agentic_rl.types import Task, Trajectory


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling could not fill a batch within filters.max_gen_batches rollouts."""


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
        mine = setup.dp.my_share(groups)
        played = _play_here(
            setup, [tasks[i] for i in mine], [groups[i] for i in mine], act, seed, progress
        )
        return setup.dp.gather_episodes(mine, played, len(tasks))
    return _play_here(setup, tasks, groups, act, seed, progress)


def _play_here(
    setup: Setup,
    tasks: list[Task],
    groups: list[str],
    act: Actor,
    seed: int,
    progress: float | None,
) -> list[list[Trajectory]]:
    if not tasks:
        return []
    cfg = setup.cfg.rollout
    envs = make_envs(setup.cfg, len(tasks), progress, pool=setup.env_pool)
    if cfg.mode == "step":
        return run_stepwise(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    if cfg.context_budget:  # long horizons: segments, each turn in the context it saw
        return run_budgeted_episodes(
            envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed
        )
    trajectories = run_episodes(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    episodes = [[t] for t in trajectories]
    if setup.cfg.env.reward_fn:  # the user's TRL-shaped reward function (rewards/custom.py)
        apply_reward_fn(setup.cfg.env.reward_fn, setup.cfg.env.reward_mode, tasks, episodes)
    return episodes


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
                episodes, cfg.rollout.group_size, f.roc_min_per_class, f.metric
            )
            batch_metrics.update(roc_metrics)
        per_batch.append(batch_metrics)
        if f.dynamic_sampling and not f.roc:
            episodes = bf.drop_constant_groups(episodes, f.metric)
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
    return summarize([samples[0] for samples in eval_episodes(setup, tasks)])


def eval_episodes(setup: Setup, tasks: list[Task] | None = None) -> list[list[Trajectory]]:
    """The greedy episodes of `evaluate` (default: the held-out tasks), samples per episode."""
    tasks = tasks if tasks is not None else setup.eval_tasks
    cfg = setup.cfg.rollout
    episodes: list[list[Trajectory]] = []
    for start in range(0, len(tasks), cfg.eval_batch_size):
        chunk = tasks[start : start + cfg.eval_batch_size]
        act = policy_actor(
            setup.generator, setup.fmt, cfg, seed=0, greedy=True, tokenizer=setup.tokenizer
        )
        episodes += play(setup, chunk, [f"eval:{t.task_id}" for t in chunk], act, seed=0)
    return episodes


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

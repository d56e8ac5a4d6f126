"""Collecting episodes: play tasks in the configured rollout mode, sample groups for a training
step through the batch filters (`collect`), greedy evaluation and scripted-expert demonstrations.

`play` is the one place where episodes are run: multi-turn (`rollout/loop.py`), step-wise
(`rollout/stepwise.py`) or with a context budget (`rollout/budgeted.py`), on local envs or a Ray
env pool, and under FSDP2 each process plays its share of the groups (`DataParallel.my_share`)
and every process receives all episodes (`DataParallel.gather_episodes`).

Infrastructure failures are not model errors: an episode whose tools' infrastructure failed
(a ToolInfrastructureError: the retrieval or sandbox server down or timing out; rollout/loop.py
ends it and marks it `infra_failed`) is replayed with fresh envs, same task, group and reset
seed, up to `rollout.infra_retries` times (`_play_here`). The whole batch is replayed with the
same sampling seed and the replay replaces it: a seeded generator samples a batch as a whole,
so once an episode ended early the others' later turns were sampled in a smaller batch, and a
subset replayed alone would come out differently too; the whole replayed batch is exactly what
an undisturbed run plays, so the run stays deterministic through an outage. An episode that
still fails is dropped from the batch and counted (`infra_dropped`), never trained on or
scored, and a batch that loses more than `rollout.max_infra_drop_fraction` of its episodes
stops the run with an `InfrastructureFailure` that says so (`drop_infra_failures`).
"""

from __future__ import annotations

import random
import time

from agentic_rl.config.rollout import max_generated_tokens
from agentic_rl.envs.base import task_has_expert
from agentic_rl.envs.from_config import make_envs
from agentic_rl.learner.batch import Episodes
from agentic_rl.rewards.custom import apply_reward_fn
from agentic_rl.rollout.actors import Actor, expert_actor, policy_actor
from agentic_rl.rollout.budgeted import run_budgeted_episodes
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.rollout.memory import run_memory_episodes
from agentic_rl.rollout.roles import add_role_rewards, role_actor
from agentic_rl.rollout.stepwise import run_stepwise
from agentic_rl.rollout.tree import (
    decoded_tokens,
    distinct_trajectories,
    run_tree_episodes,
    train_leaf_indices,
)
from agentic_rl.train import shaping as bf
from agentic_rl.train.setup import Setup
from agentic_rl.train.summary import env_summary_metrics, summarize
from agentic_rl.types import Task, Trajectory


class DynamicSamplingError(RuntimeError):
    """Dynamic sampling could not fill a batch within filters.max_gen_batches rollouts."""


class InfrastructureFailure(RuntimeError):
    """Too many episodes of a batch failed for infrastructure reasons (tool servers down,
    timeouts) even after their retries: the run stops rather than train on a shrunken batch."""


def infra_failed(samples: list[Trajectory]) -> bool:
    """Whether an episode ended on a failure of its tools' infrastructure (rollout/loop.py)."""
    return any(s.metrics.get("infra_failed", 0.0) > 0 for s in samples)


def drop_infra_failures(
    episodes: list[list[Trajectory]], max_fraction: float, what: str
) -> tuple[list[int], dict[str, float]]:
    """Indices of the episodes to keep (those whose infrastructure held) and the counts;
    raises InfrastructureFailure when more than `max_fraction` of them failed, or all did."""
    keep = [i for i, samples in enumerate(episodes) if not infra_failed(samples)]
    dropped = len(episodes) - len(keep)
    retried = sum(1 for samples in episodes if samples and samples[0].metrics.get("infra_retries"))
    if episodes and dropped and (dropped > max_fraction * len(episodes) or not keep):
        raise InfrastructureFailure(
            f"{dropped} of {len(episodes)} {what} episodes failed for infrastructure reasons "
            "(a tool server unreachable, failing or timing out; see the messages above) even "
            f"after rollout.infra_retries replays each, more than rollout.max_infra_drop_fraction="
            f"{max_fraction:g} allows. Check the retrieval / sandbox servers and restart the run "
            "(it resumes from its last checkpoint)"
        )
    return keep, {"infra_dropped": float(dropped), "infra_retried": float(retried)}


def play(
    setup: Setup,
    tasks: list[Task],
    groups: list[str],
    act: Actor,
    seed: int,
    progress: float | None = None,
    tree: bool = False,
) -> list[list[Trajectory]]:
    """Run one episode per task in the configured rollout mode; samples per episode.
    `progress` (fraction of RL done) reaches envs that take it; None = the env's default.
    `tree`: a training rollout, played as trees where rollout.tree asks for them (each group's
    episodes are then the leaves of its trees, rollout/tree.py); evaluations never are."""
    if setup.dp is not None:  # fsdp2: this process plays its share, every process gets all
        mine = setup.dp.my_share(groups)
        played = _play_here(
            setup, [tasks[i] for i in mine], [groups[i] for i in mine], act, seed, progress, tree
        )
        return setup.dp.gather_episodes(mine, played, len(tasks))
    return _play_here(setup, tasks, groups, act, seed, progress, tree)


def _play_here(
    setup: Setup,
    tasks: list[Task],
    groups: list[str],
    act: Actor,
    seed: int,
    progress: float | None,
    tree: bool = False,
) -> list[list[Trajectory]]:
    """`_play_once`, then, while episodes failed for infrastructure reasons, the batch replayed
    with fresh envs (same tasks, groups and seed) after rollout.infra_retry_wait_s x attempt
    seconds, up to rollout.infra_retries times; each replay replaces the whole batch (see the
    module docstring). The samples of an episode that failed before carry `infra_retries`."""
    cfg = setup.cfg.rollout
    episodes = _play_once(setup, tasks, groups, act, seed, progress, tree)
    retries = [0] * len(episodes)
    for attempt in range(1, cfg.infra_retries + 1):
        failed = [i for i, samples in enumerate(episodes) if infra_failed(samples)]
        if not failed:
            break
        for i in failed:
            retries[i] = attempt
        time.sleep(cfg.infra_retry_wait_s * attempt)  # a restarting server needs a moment
        episodes = _play_once(setup, tasks, groups, act, seed, progress, tree)
    for samples, count in zip(episodes, retries, strict=True):
        for sample in samples if count else []:
            sample.metrics["infra_retries"] = float(count)
    return episodes


def _play_once(
    setup: Setup,
    tasks: list[Task],
    groups: list[str],
    act: Actor,
    seed: int,
    progress: float | None,
    tree: bool = False,
) -> list[list[Trajectory]]:
    if not tasks:
        return []
    cfg = setup.cfg.rollout
    envs = make_envs(setup.cfg, len(tasks), progress, pool=setup.env_pool)
    if tree and cfg.tree.roots:  # Tree-GRPO: each group's episodes are its trees' leaves
        episodes = run_tree_episodes(
            envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed
        )
        if setup.cfg.env.reward_fn:
            apply_reward_fn(setup.cfg.env.reward_fn, setup.cfg.env.reward_mode, tasks, episodes)
        return episodes
    if cfg.mode == "step":
        return run_stepwise(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    if cfg.mode == "memory":  # MemAgent: several independent conversations per episode
        played = run_memory_episodes(
            envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed
        )
        add_role_rewards(played)  # multi-agent envs: each role's own reward terms
        return played
    if cfg.context_budget:  # long horizons: segments, each turn in the context it saw
        return run_budgeted_episodes(
            envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed
        )
    trajectories = run_episodes(envs, tasks, groups, act, setup.fmt, setup.tokenizer, cfg, seed)
    episodes = [[t] for t in trajectories]
    if setup.cfg.env.reward_fn:  # the user's TRL-shaped reward function (rewards/custom.py)
        apply_reward_fn(setup.cfg.env.reward_fn, setup.cfg.env.reward_mode, tasks, episodes)
    return episodes


def rollout(
    setup: Setup,
    tasks: list[Task],
    group_size: int,
    seed: int,
    step: int,
    stats: dict[str, float] | None = None,
) -> Episodes:
    """`group_size` sampled episodes of each task; the episodes of a task form a group.
    Episodes that failed for infrastructure reasons after their retries are left out (a group
    may then be smaller); their counts are added to `stats`."""
    expanded = [task for task in tasks for _ in range(group_size)]
    groups = [f"{step}:{task.task_id}" for task in expanded]
    act = policy_actor(
        setup.generator, setup.fmt, setup.cfg.rollout, seed=seed, tokenizer=setup.tokenizer
    )
    act = role_actor(act, setup.generator)  # model.role_policies: each role its own policy
    progress = min(1.0, (step - 1) / max(setup.cfg.trainer.steps, 1))
    played = Episodes(play(setup, expanded, groups, act, seed, progress, tree=True), expanded)
    keep, counts = drop_infra_failures(
        played.samples, setup.cfg.rollout.max_infra_drop_fraction, "rollout"
    )
    if stats is not None:
        for key, value in counts.items():
            stats[key] = stats.get(key, 0.0) + value
    return played if len(keep) == len(played) else played.select(keep)


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
    infra: dict[str, float] = {"infra_dropped": 0.0, "infra_retried": 0.0}
    reused_before = getattr(setup.generator, "reused_tokens", None)  # the HF and vLLM engines
    gen = 0
    while gen < (f.max_gen_batches if f.dynamic_sampling else 1) and remaining:
        chosen = rng.sample(remaining, min(want, len(remaining)))
        taken = {id(task) for task in chosen}
        remaining = [task for task in remaining if id(task) not in taken]
        seed = cfg.trainer.seed * 100_000 + step + gen * 1_000_003
        episodes = rollout(setup, chosen, group_size, seed, step, infra)
        gen += 1
        trainable, batch_metrics = episodes, {}
        if f.ttrl_vote_samples:  # vote on all N, train on M of them
            trainable, vote_metrics = bf.ttrl_relabel(
                episodes, cfg.rollout.group_size, setup.tokenizer
            )
            batch_metrics.update(vote_metrics)
        if f.overlong_buffer:  # in place, so `trainable` (the same samples) sees it too
            max_len = max_generated_tokens(cfg.rollout)  # what an episode can reach
            batch_metrics.update(bf.overlong_penalty(episodes, max_len, f.overlong_buffer))
        if cfg.rollout.tree.train_leaves:  # Tree-GRPO: K leaves of each tree train
            k = cfg.rollout.tree.train_leaves
            trainable = trainable.select(train_leaf_indices(trainable.samples, k, seed))
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
            # what the step's rollouts cost and how much they explored (tree rollouts share
            # prefixes: a leaf's copied tokens were sampled once, by its parent)
            "decoded_tokens": float(sum(decoded_tokens(s) for ep in generated.samples for s in ep)),
            "distinct_trajectories": float(
                distinct_trajectories([s for ep in generated.samples for s in ep])
            ),
            **infra,
        }
    )
    if reused_before is not None:  # prompt tokens whose KV the generator had kept: not prefilled
        metrics["reused_prompt_tokens"] = float(setup.generator.reused_tokens - reused_before)
    return kept, generated, metrics


def evaluate(setup: Setup, tasks: list[Task] | None = None) -> dict[str, float]:
    """Greedy episodes on the held-out tasks: success rate, tool use, reward."""
    episodes = eval_episodes(setup, tasks)
    return summarize([samples[0] for samples in episodes], env_summary_metrics(setup.cfg))


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
        act = role_actor(act, setup.generator)
        episodes += play(setup, chunk, [f"eval:{t.task_id}" for t in chunk], act, seed=0)
    # An episode the infrastructure failed says nothing about the model: not scored.
    keep, _ = drop_infra_failures(episodes, setup.cfg.rollout.max_infra_drop_fraction, "eval")
    return episodes if len(keep) == len(episodes) else [episodes[i] for i in keep]


def expert_tasks(tasks: list[Task], what: str) -> list[Task]:
    """The tasks the env's scripted expert can play (`task_has_expert`); says which kinds of
    task it leaves out, and refuses when none is left."""
    playable = [t for t in tasks if task_has_expert(t)]
    if len(playable) < len(tasks):
        kinds = sorted({t.prompt for t in tasks if not task_has_expert(t)})
        shown = ", ".join(kinds[:8]) + (f", ... ({len(kinds)} kinds)" if len(kinds) > 8 else "")
        if not playable:
            raise ValueError(
                f"{what}: no training task has a scripted expert (tasks without one: {shown}); "
                "add tasks that have one or turn the stage off"
            )
        print(f"{what}: no scripted expert for {shown}: these tasks are not demonstrated")
    return playable


def expert_demos(setup: Setup, num_tasks: int) -> tuple[list[Trajectory], int]:
    """Scripted-expert samples of `num_tasks` training tasks (successful episodes only; in step
    mode their step samples, so the model learns in the contexts it will act in) and the
    number of successful episodes. With warm_start.recovery_fraction a share of them shows
    the env's scripted mistake, untrained (rollout/actors.py `expert_actor`); a sample
    left with no trained token (a step sample of the mistake) is dropped."""
    cfg = setup.cfg
    rng = random.Random(cfg.trainer.seed + 17)
    tasks = [rng.choice(expert_tasks(setup.train_tasks, "warm start")) for _ in range(num_tasks)]
    fraction = cfg.warm_start.recovery_fraction
    act = expert_actor(setup.fmt, setup.tokenizer, fraction, cfg.trainer.seed)
    episodes = play(setup, tasks, [f"expert:{i}" for i in range(len(tasks))], act, seed=0)
    demos = [samples for samples in episodes if samples[0].metrics["success"] >= 1.0]
    if fraction > 0:
        shown = sum(any(map(has_untrained_turn, samples)) for samples in demos)
        print(
            f"warm start: {shown} of {len(demos)} expert episodes show the env's scripted "
            "mistake (untrained) and recover",
            flush=True,
        )
    trained = [sample for samples in demos for sample in samples if sample.num_generated]
    return trained, len(demos)


def has_untrained_turn(trajectory: Trajectory) -> bool:
    """Whether a turn of `trajectory` carries no trained token (the expert's scripted mistake,
    in a recovery demonstration)."""
    return any(not any(trajectory.loss_mask[start:end]) for start, end in trajectory.turn_spans)

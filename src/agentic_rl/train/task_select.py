"""Choosing the training tasks by the policy's reward variance (`env.select_by_variance`).

1-shot RLVR (Wang et al. 2025) trains on one example chosen by the variance of its training
accuracy: an example the model sometimes solves. Here, before RL (after any warm start), the
policy samples `env.select_samples` episodes of each of the first `env.select_by_variance`
training tasks at the rollout temperature, and `setup.train_tasks` becomes the
`env.num_train_tasks` candidates whose rewards vary most (`algos.selection.select_by_variance`).
Departure from the paper: it ranks by the variance of each example's accuracy over a whole RL
run on the full dataset (thousands of steps); a CPU budget affords one scoring pass with the
policy RL starts from, which measures the same thing (does this example give GRPO a signal
now) at the point where it matters.

The choice goes to the metrics (prefix task_select, step 0), to the run state (and so to every
checkpoint and to summary.json "task_selection"); a resumed run restores it instead of
sampling again. Sampling is seeded by trainer.seed, so the same seed chooses the same tasks.
"""

from __future__ import annotations

import copy
from typing import Any

from agentic_rl.algos.selection import reward_variance, select_by_variance
from agentic_rl.envs.from_config import make_tasks
from agentic_rl.logging import RunLogger
from agentic_rl.train import collect
from agentic_rl.train.collect import drop_infra_failures, play
from agentic_rl.train.setup import Setup
from agentic_rl.types import Task

# Offset of the selection's sampling seeds from the training steps' (trainer.seed * 100_000
# + step): distinct for any run shorter than this many steps.
_SEED_OFFSET = 99_000


def candidate_tasks(setup: Setup) -> list[Task]:
    """The first env.select_by_variance training tasks (generated from env.seed, or rows of
    env.train_file), made as the run's own training tasks are, only more of them."""
    cfg = copy.deepcopy(setup.cfg)
    cfg.env.num_train_tasks = setup.cfg.env.select_by_variance
    return make_tasks(cfg, "train")


def candidate_rewards(setup: Setup, candidates: list[Task]) -> list[list[float]]:
    """env.select_samples sampled episode rewards per candidate (fewer where episodes failed
    for infrastructure reasons and were dropped), played in chunks of about
    rollout.eval_batch_size episodes with seeds from trainer.seed."""
    cfg = setup.cfg
    n = cfg.env.select_samples
    per_chunk = max(1, cfg.rollout.eval_batch_size // n)
    rewards: list[list[float]] = [[] for _ in candidates]
    for chunk, start in enumerate(range(0, len(candidates), per_chunk)):
        index = [c for c in range(start, min(start + per_chunk, len(candidates))) for _ in range(n)]
        tasks = [candidates[c] for c in index]
        seed = cfg.trainer.seed * 100_000 + _SEED_OFFSET + chunk
        # collect's policy_actor, as every trainer rollout (tests script them all in one place)
        act = collect.policy_actor(
            setup.generator, setup.fmt, cfg.rollout, seed, tokenizer=setup.tokenizer
        )
        episodes = play(setup, tasks, [f"select:{c}" for c in index], act, seed)
        keep, _ = drop_infra_failures(
            episodes, cfg.rollout.max_infra_drop_fraction, "task selection"
        )
        for i in keep:
            rewards[index[i]].append(float(episodes[i][0].reward))
    return rewards


def select_train_tasks(setup: Setup, logger: RunLogger | None = None) -> dict[str, Any]:
    """Score the candidates, set `setup.train_tasks` to the chosen ones, log and return the
    choice (JSON-serialisable: it goes into the run state and summary.json)."""
    cfg = setup.cfg
    candidates = candidate_tasks(setup)
    rewards = candidate_rewards(setup, candidates)
    chosen = select_by_variance(rewards, cfg.env.num_train_tasks)
    means = [sum(r) / len(r) if r else 0.0 for r in rewards]
    variances = [reward_variance(r) for r in rewards]
    selection = {
        "candidates": len(candidates),
        "samples": cfg.env.select_samples,
        "chosen": chosen,
        "chosen_task_ids": [candidates[c].task_id for c in chosen],
        "chosen_mean_reward": [means[c] for c in chosen],
        "chosen_variance": [variances[c] for c in chosen],
        "mean_rewards": means,
    }
    apply_selection(setup, selection, candidates)
    metrics = {
        "chosen_index": float(chosen[0]),
        "chosen_mean_reward": means[chosen[0]],
        "chosen_variance": variances[chosen[0]],
        "candidates_mean_reward": sum(means) / len(means),
        "candidates_varying": sum(v > 0 for v in variances) / len(variances),
    }
    if logger is not None:
        logger.log(0, metrics, prefix="task_select")
    if not any(v > 0 for v in variances):
        print(
            f"task selection: no candidate's rewards varied over {cfg.env.select_samples} "
            f"samples; training on the first {len(chosen)}",
            flush=True,
        )
    print(
        f"task selection: chose candidate(s) {chosen} of {len(candidates)} "
        f"({', '.join(selection['chosen_task_ids'])}; mean reward "
        f"{', '.join(f'{means[c]:.3f}' for c in chosen)}); candidates' mean reward "
        f"{metrics['candidates_mean_reward']:.3f}, {metrics['candidates_varying']:.0%} varying",
        flush=True,
    )
    return selection


def apply_selection(
    setup: Setup, selection: dict[str, Any], candidates: list[Task] | None = None
) -> None:
    """Train on the chosen candidates of `selection` (as returned by `select_train_tasks`,
    e.g. restored from a checkpoint's state)."""
    candidates = candidates if candidates is not None else candidate_tasks(setup)
    setup.train_tasks = [candidates[c] for c in selection["chosen"]]

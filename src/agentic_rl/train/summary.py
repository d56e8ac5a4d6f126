"""Run summaries: episode and batch metrics, the summary.json of a run and its table."""

from __future__ import annotations

from typing import Any

import torch

from agentic_rl.algos.gigpo import step_advantages
from agentic_rl.algos.roles import role_units
from agentic_rl.algos.turns import turn_group_advantages, turn_slots
from agentic_rl.config.schema import Config
from agentic_rl.envs.base import SummaryMetrics, summary_metrics_of
from agentic_rl.envs.registry import env_class
from agentic_rl.learner.batch import TrainBatch
from agentic_rl.rollout.episode import ENV_METRIC_PREFIX
from agentic_rl.types import Trajectory

SUBSET_MARK = "@"
"""An env metric named `env/<metric>@<subset>` (BFCL's `env/accuracy@simple_python`) is measured
on a subset of the tasks: it is averaged over the episodes that report it, not over all."""


def _env_metric(trajectories: list[Trajectory], key: str) -> float:
    """The mean of an env metric: over all episodes (one that never reported it counts 0), or,
    for a subset metric, over the episodes that reported it."""
    if SUBSET_MARK in key:
        values = [t.metrics[key] for t in trajectories if key in t.metrics]
    else:
        values = [t.metrics.get(key, 0.0) for t in trajectories]
    return sum(values) / max(len(values), 1)


def env_summary_metrics(cfg: Config) -> SummaryMetrics | None:
    """The scores the run's env defines over its metrics (its class's `summary_metrics`, e.g.
    BFCL's overall accuracies from its per-category ones), None where it defines none."""
    return summary_metrics_of(env_class(cfg.env.name))


def summarize(
    trajectories: list[Trajectory], derive: SummaryMetrics | None = None
) -> dict[str, float]:
    """Episode metrics; pass one trajectory per episode (the first step in step mode).
    `derive`: the env's scores over its metric means (`env_summary_metrics`), added to them."""
    n = max(len(trajectories), 1)
    mean = lambda key: sum(t.metrics[key] for t in trajectories) / n  # noqa: E731
    env_keys = sorted(
        {k for t in trajectories for k in t.metrics if k.startswith(ENV_METRIC_PREFIX)}
    )
    env_metrics = {k: _env_metric(trajectories, k) for k in env_keys}
    episodes = {k: float(sum(k in t.metrics for t in trajectories)) for k in env_keys}
    return {
        # the env's own metrics (rollout/episode.py), see `_env_metric`
        **env_metrics,
        **(derive(env_metrics, episodes) if derive is not None else {}),
        "success": mean("success"),
        "reward": sum(t.reward for t in trajectories) / n,
        "tool_calls_per_episode": mean("tool_calls"),
        "invalid_actions_per_episode": mean("invalid_actions"),
        "turns": mean("turns"),
        "response_tokens": mean("response_tokens"),
        "episodes": float(len(trajectories)),
    }


def advantage_metrics(batch: TrainBatch, gigpo_norm: str = "mean_std_norm") -> dict[str, float]:
    """How much of the batch carries a policy gradient (and, for GiGPO, from the step term)."""
    assert batch.advantages is not None
    rows_with_signal = (batch.advantages * batch.loss_mask != 0).any(dim=1).float()
    metrics = {"samples": float(len(batch)), "nonzero_adv_fraction": float(rows_with_signal.mean())}
    if batch.step_group_ids is not None and batch.step_returns is not None:
        a_s = step_advantages(batch.step_returns, batch.step_group_ids, gigpo_norm)
        sizes = torch.bincount(batch.step_group_ids)[batch.step_group_ids]
        metrics["step_adv_nonzero"] = float((a_s != 0).float().mean())
        metrics["shared_step_groups"] = float((sizes > 1).float().mean())
    if batch.num_turns is not None and batch.turn_rewards is not None:
        # MT-GRPO's turn signal: the share of turns before an episode's last whose step reward
        # differs from the group's at that turn index (a non-zero turn advantage), whatever the
        # estimator; only for batches with such turns (multi-turn episode rows)
        turns, table, groups = batch.num_turns, batch.turn_rewards, batch.group_ids
        if batch.episode_turns and batch.episode_index is not None:  # each unit once
            _, first, groups = role_units(batch.episode_index, groups, batch.agent_ids)
            turns, table = turns[first], table[first]
        earlier = turn_slots(turns - 1, table.shape[1])
        if earlier.any():
            turn_adv = turn_group_advantages(table, earlier, groups)
            metrics["turn_adv_nonzero"] = float((turn_adv[earlier] != 0).float().mean())
    return metrics


def run_summary(cfg: Config, state: dict[str, Any], step: int, seconds: float) -> dict[str, Any]:
    evals = state["evals"]

    def pick(e: dict[str, float]) -> dict[str, float]:  # the standard columns, then the env's
        columns = ("success", "tool_calls_per_episode", "reward", "invalid_actions_per_episode")
        return {k: e[k] for k in columns} | {
            k: v for k, v in e.items() if k.startswith(ENV_METRIC_PREFIX)
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
    if "task_selection" in state:  # env.select_by_variance (train/task_select.py)
        summary["task_selection"] = state["task_selection"]
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

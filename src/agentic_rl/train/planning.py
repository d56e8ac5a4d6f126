"""Evaluating an inference-time planner on a recipe's held-out tasks: `agentic-rl eval RECIPE
--planner mcts|cot` (RAP's MCTS or greedy chain of thought, rollout/rap.py).

For each task: reset the env, plan from its state in text with the policy model (no training,
no weights change), then execute the plan in the real env, one action per step, until it ends.
Success is the env's; for Blocksworld the plan is also checked exactly (`valid_plan`: every
action applicable). The compute spent (model calls and tokens) is reported per problem.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.from_config import make_envs
from agentic_rl.rollout.mcts import MCTSConfig
from agentic_rl.rollout.rap import LMScorer, RAPConfig, cot_plan, is_text_domain, rap_plan
from agentic_rl.train.setup import Setup
from agentic_rl.types import Action, Task

PLANNERS = ("mcts", "cot")


def rap_config(setup: Setup, task: Task) -> RAPConfig:
    """The recipe's planner settings for one task (depth 0 -> the task's plan length)."""
    p = setup.cfg.planner
    depth = p.depth_limit or int(task.fields.get("plan_length", 0))
    if depth < 1:
        raise ConfigError(
            f"planner.depth_limit is 0 and task {task.task_id} has no plan_length: set it"
        )
    search = MCTSConfig(p.iterations, depth, p.w_exp, p.cum_reward, p.calc_q)
    return RAPConfig(p.alpha, p.goal_reward, p.world_model, p.max_state_tokens, search)


def execute(env: Any, plan: list[str]) -> tuple[float, int]:
    """Run `plan` in the env one action per step; (success, actions executed)."""
    success, executed = 0.0, 0
    for name in plan:
        result = env.step(Action(kind="tool", name="action", arguments={"actions": name}))
        executed += 1
        if result.terminated or result.truncated:
            success = float(result.info.get("success", 0.0))
            break
    return success, executed


def evaluate_planner(
    setup: Setup,
    planner: str,
    tasks: list[Task] | None = None,
    log: bool = True,
    out: Path | None = None,
) -> dict[str, Any]:
    """Plan and execute every held-out task (or `tasks`); the mean success, compute per problem,
    and per-task rows. With `out`, the results so far are rewritten there after every task (a
    run stopped by a time limit keeps what it measured)."""
    if planner not in PLANNERS:
        raise ConfigError(f"--planner must be one of {', '.join(PLANNERS)}, got {planner!r}")
    tasks = tasks if tasks is not None else setup.eval_tasks
    env = make_envs(setup.cfg, 1)[0]
    if not is_text_domain(env):
        raise ConfigError(
            f"env {setup.cfg.env.name!r} cannot be simulated in text (it lacks plan_root, "
            "plan_goal, plan_parse, plan_actions, plan_progress): no planner for it"
        )
    scorer = LMScorer(
        setup.policy, setup.tokenizer, setup.generator, setup.cfg.model.logprob_chunk_size
    )
    rows = []
    for i, task in enumerate(tasks):
        env.reset(task, seed=0)
        before = scorer.budget.as_dict()
        t0 = time.perf_counter()
        if planner == "mcts":
            plan, stats = rap_plan(env, scorer, rap_config(setup, task))
        else:
            plan, stats = cot_plan(env, scorer, env.action_names, setup.cfg.planner.cot_max_tokens)
        seconds = time.perf_counter() - t0
        valid = _valid(env, task, plan)
        env.reset(task, seed=0)
        success, executed = execute(env, plan)
        spent = {k: v - before[k] for k, v in scorer.budget.as_dict().items()}
        row = {
            "task_id": task.task_id,
            "plan_length": task.fields.get("plan_length"),
            "plan": plan,
            "success": success,
            "valid_plan": valid,
            "executed": executed,
            "seconds": seconds,
            **stats,
            **spent,
        }
        rows.append(row)
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(summarize(planner, rows), indent=2))
        if log:
            print(
                f"[{planner}] {i + 1}/{len(tasks)} {task.task_id} len={row['plan_length']} "
                f"success={success:.0f} plan={len(plan)} calls={spent['model_calls']:.0f} "
                f"{seconds:.1f}s",
                flush=True,
            )
    return summarize(planner, rows)


def summarize(planner: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean success, plan validity and compute per problem over `rows`, and the rows."""
    n = max(len(rows), 1)
    summary: dict[str, Any] = {
        "planner": planner,
        "tasks": len(rows),
        "success": sum(r["success"] for r in rows) / n,
        "valid_plan": sum(float(r["valid_plan"]) for r in rows) / n,
    }
    for key in ("model_calls", "prompt_tokens", "generated_tokens", "seconds"):
        summary[f"{key}_per_problem"] = sum(r[key] for r in rows) / n
    by_length: dict[str, list[float]] = {}
    for r in rows:
        by_length.setdefault(str(r["plan_length"]), []).append(r["success"])
    predicted = sum(r.get("world_model_predictions", 0.0) for r in rows)
    if predicted:  # the model as world model: how often its next state was the true one
        correct = sum(r.get("world_model_correct", 0.0) for r in rows)
        summary["world_model_accuracy"] = correct / predicted
    summary["success_by_plan_length"] = {k: sum(v) / len(v) for k, v in sorted(by_length.items())}
    summary["rows"] = rows
    return summary


def _valid(env: Any, task: Task, plan: list[str]) -> bool:
    """Every action of `plan` applicable in turn, by the env's exact simulator in text."""
    state = env.plan_root()
    for name in plan:
        state = env.plan_transition(state, name) if hasattr(env, "plan_transition") else state
        if not state:
            return False
    return True

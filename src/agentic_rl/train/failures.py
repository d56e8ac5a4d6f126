"""UI-TARS-style learning from failures (Qin et al. 2025, "UI-TARS"; the training details are
from a secondary source, RECIPES.md): pairs at the first failing step, then DPO.

The agent plays many training tasks. For each failed episode the env is replayed turn by turn
with the agent's own actions (envs are deterministic given the task and reset seed); at every
turn the scripted expert is asked for its action at that exact state, and the first turn where
the agent's action differs from the expert's is the failing step. The pair shares everything
before that turn, token for token (the same prompt, the same earlier turns and observations):

    chosen   = prefix + the expert's action at that state   (loss mask 1 on the action only)
    rejected = prefix + the agent's action as it was sampled (its exact token ids)

and DPO (train/dpo.py) prefers the correction. UI-TARS also trains the step after the error
(`dpo.recovery_pairs`): the replay executes the agent's erroneous action, and at the next turn,
if the agent's own next action differs from the expert's there, a second pair prefers the
expert's recovery over it, with the error in the shared prefix (loss mask 0: the error itself is
never trained). An episode the error ended, or whose next action was already the expert's, has
no recovery pair. "Differs" is judged by the env's
`canonical_action` where it has one (so `click( 3 )` equals `click(3)`), else by the parsed
action's fields; any deviation from the expert counts, which is conservative where several
orders would succeed. A replay that does not reproduce the episode's observations (an env that
is not deterministic) gives no pair and is counted, never a wrong pair.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl.envs.base import Env
from agentic_rl.envs.from_config import make_envs
from agentic_rl.formats.chat import ChatFormat, TagFormat
from agentic_rl.logging import RunLogger
from agentic_rl.model.tokens import encode_text
from agentic_rl.train import collect
from agentic_rl.train.dpo import dpo_from_config
from agentic_rl.train.setup import Setup
from agentic_rl.types import Action, Task, Trajectory

Pair = tuple[Trajectory, Trajectory]  # (chosen, rejected), as train/dpo.py takes them


@dataclass
class FailurePair:
    """A (chosen, rejected) pair and where it came from."""

    chosen: Trajectory
    rejected: Trajectory
    turn: int  # the turn of the pair (0-based): the failing turn, or the one after it
    task_id: str
    kind: str = "correction"  # "correction" (at the error) or "recovery" (the turn after it)


def reset_seed(seed: int, group: str) -> int:
    """The reset seed `rollout.loop.start_episodes` gives an episode of `group`."""
    return seed + zlib.crc32(group.encode()) % 100_000


def canonical(env: Env, action: Action) -> Hashable:
    """What `action` does, for comparing the agent's with the expert's."""
    fn = getattr(env, "canonical_action", None)
    if fn is not None:
        return fn(action)  # type: ignore[no-any-return]
    args = tuple(sorted((k, str(v).strip()) for k, v in action.arguments.items()))
    return (action.kind, action.name, action.text.strip(), args)


def _pair_side(prefix: Trajectory, end: int, ids: Sequence[int], mask: Sequence[int]) -> Trajectory:
    return Trajectory(
        token_ids=list(prefix.token_ids[:end]) + list(ids),
        loss_mask=[0] * end + list(mask),
        logprobs=[0.0] * (end + len(ids)),
        prompt_length=end,
        task_id=prefix.task_id,
    )


def _pair_at(
    trajectory: Trajectory,
    k: int,
    agent_ids: Sequence[int],
    expert: Action,
    fmt: ChatFormat,
    tokenizer: Any,
    task: Task,
    kind: str,
) -> FailurePair:
    start, end = trajectory.turn_spans[k]
    chosen_ids = encode_text(tokenizer, fmt.render_action(expert))
    return FailurePair(
        chosen=_pair_side(trajectory, start, chosen_ids, [1] * len(chosen_ids)),
        rejected=_pair_side(trajectory, start, agent_ids, trajectory.loss_mask[start:end]),
        turn=k,
        task_id=task.task_id,
        kind=kind,
    )


def failing_step_pairs(
    trajectory: Trajectory,
    task: Task,
    env: Env,
    fmt: ChatFormat,
    tokenizer: Any,
    seed: int,
    recovery: bool = True,
) -> tuple[list[FailurePair], str]:
    """The pair at the first failing turn of `trajectory` (played from `env.reset(task, seed)`)
    and, with `recovery`, the recovery pair at the turn after it (module doc), and "" ; or no
    pair and why ("no_deviation", "replay_mismatch", "expert_error")."""
    env.reset(task, seed)
    expert_parser = TagFormat(env.tools)  # the expert writes the tag format
    spans = trajectory.turn_spans
    pairs: list[FailurePair] = []
    for k, (start, end) in enumerate(spans):
        agent_ids = trajectory.token_ids[start:end]
        agent = fmt.parse(tokenizer.decode(agent_ids), "stop")
        try:
            expert = expert_parser.parse(env.expert_turn(), "stop")
        except Exception:  # an expert that cannot act here (an unforeseen page): no pair
            return pairs, "" if pairs else "expert_error"
        if canonical(env, agent) != canonical(env, expert):
            kind = "recovery" if pairs else "correction"
            pairs.append(_pair_at(trajectory, k, agent_ids, expert, fmt, tokenizer, task, kind))
            if kind == "recovery" or not recovery:
                return pairs, ""
        elif pairs:  # the agent's next action was the expert's: it recovered by itself
            return pairs, ""
        result = env.step(agent)
        if result.terminated or result.truncated or k + 1 == len(spans):
            break
        # The replay must see what the agent saw: the observation tokens between the turns.
        if result.observation is None:
            return pairs, "" if pairs else "replay_mismatch"
        obs_ids = encode_text(tokenizer, fmt.render_observation(result.observation))
        if list(trajectory.token_ids[end : spans[k + 1][0]]) != obs_ids:
            return pairs, "" if pairs else "replay_mismatch"
    return pairs, "" if pairs else "no_deviation"


def failure_pairs(
    episodes: Sequence[Trajectory],
    tasks: Sequence[Task],
    groups: Sequence[str],
    seed: int,
    new_env: Callable[[], Env],
    fmt: ChatFormat,
    tokenizer: Any,
    recovery: bool = True,
) -> tuple[list[FailurePair], dict[str, float]]:
    """Pairs from the failed episodes (success < 1) and counts of what happened to each:
    `pairs` at the first failing step, `recovery_pairs` at the step after it."""
    keys = ("episodes", "failed", "pairs", "recovery_pairs")
    counts = dict.fromkeys((*keys, "no_deviation", "replay_mismatch", "expert_error"), 0.0)
    pairs = []
    for trajectory, task, group in zip(episodes, tasks, groups, strict=True):
        counts["episodes"] += 1
        if trajectory.metrics.get("success", 0.0) >= 1.0 or not trajectory.turn_spans:
            continue
        counts["failed"] += 1
        found, why = failing_step_pairs(
            trajectory, task, new_env(), fmt, tokenizer, reset_seed(seed, group), recovery
        )
        if not found:
            counts[why] += 1
        for pair in found:
            pairs.append(pair)
            counts["pairs" if pair.kind == "correction" else "recovery_pairs"] += 1
    return pairs, counts


def write_pairs(path: Path, pairs: Sequence[FailurePair]) -> None:
    """The pairs as a JSONL file `agentic-rl dpo` reads back (token-native records)."""
    with path.open("w") as f:
        for p in pairs:
            record = {
                side: {"token_ids": t.token_ids, "loss_mask": t.loss_mask, "task_id": p.task_id}
                for side, t in (("chosen", p.chosen), ("rejected", p.rejected))
            }
            f.write(json.dumps({**record, "turn": p.turn, "kind": p.kind}) + "\n")


def learn_from_failures(
    setup: Setup, logger: RunLogger, out: Path | None = None
) -> dict[str, float]:
    """Play `dpo.failure_tasks` training tasks with the policy (sampled at the rollout
    temperature), build the first-failing-step pairs and train the policy with DPO on them
    (against a frozen copy of itself). Writes the pairs to OUT/failure_pairs.jsonl."""
    cfg = setup.cfg
    rng = random.Random(cfg.trainer.seed + 29)
    playable = collect.expert_tasks(setup.train_tasks, "failure pairs")  # the fix is the expert's
    tasks = [rng.choice(playable) for _ in range(cfg.dpo.failure_tasks)]
    groups = [f"failure:{i}:{task.task_id}" for i, task in enumerate(tasks)]
    seed = cfg.trainer.seed * 100_000 + 7
    act = collect.policy_actor(
        setup.generator, setup.fmt, cfg.rollout, seed=seed, tokenizer=setup.tokenizer
    )
    episodes = [samples[0] for samples in collect.play(setup, tasks, groups, act, seed)]
    pairs, counts = failure_pairs(
        episodes,
        tasks,
        groups,
        seed,
        lambda: make_envs(cfg, 1)[0],
        setup.fmt,
        setup.tokenizer,
        cfg.dpo.recovery_pairs,
    )
    print(
        f"learning from failures: {int(counts['failed'])} of {len(tasks)} episodes failed, "
        f"{int(counts['pairs'])} pairs at the error, {int(counts['recovery_pairs'])} after it",
        flush=True,
    )
    metrics = {f"{k}": v for k, v in counts.items()}
    metrics["success_rate"] = 1.0 - counts["failed"] / max(counts["episodes"], 1.0)
    if out is not None:
        write_pairs(out / "failure_pairs.jsonl", pairs)
    if pairs:
        result = dpo_from_config(
            cfg, setup.policy, [(p.chosen, p.rejected) for p in pairs], setup.tokenizer.pad_token_id
        )
        metrics.update(result)
    logger.log(0, metrics, prefix="failure_dpo")
    return metrics

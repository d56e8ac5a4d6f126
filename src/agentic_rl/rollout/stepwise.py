"""Step-wise rollouts (verl-agent / GiGPO): each turn is its own training sample, conditioned on
the prompt and a window of recent steps instead of the whole growing episode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.loop import (
    Actor,
    _episode_metrics,
    _record_step,
    end_episode,
    start_episodes,
    step_envs,
    turn_tokens,
)
from agentic_rl.types import Task, Trajectory


def step_context(
    prompt: list[int], history: Sequence[tuple[list[int], list[int]]], cfg: RolloutConfig
) -> list[int]:
    """The context of the next step: prompt + the last `history_window` steps, each the model
    turn's sampled ids followed by the observation ids inserted after it.

    With `history_window=0` the latest observation alone follows the prompt (the agent must see
    the current state). Oldest steps are dropped first until the context leaves room for a full
    turn within `max_total_tokens`. Ids are spliced, never re-encoded, so each window is exactly
    what the model is conditioned on."""
    window = cfg.history_window
    steps = [list(step) for step in history[-window:]] if window else []
    if not window and history:
        steps = [[[], list(history[-1][1])]]
    room = cfg.max_total_tokens - cfg.max_tokens_per_turn
    while steps and sum(len(a) + len(o) for a, o in steps) > room:
        steps.pop(0)
    return list(prompt) + [i for action, obs in steps for i in (*action, *obs)]


def run_stepwise(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    seed: int,
) -> list[list[Trajectory]]:
    """Run episodes step-wise (verl-agent / GiGPO); returns one list of step samples per episode.

    Step t's sample: `token_ids` = its context (loss mask 0) + the turn's sampled ids (loss mask
    1, behaviour logprobs), `anchors` = [the anchor of the state it acted on] (empty if the env
    gives none), `step_rewards` = [r_t], `reward` = the episode's return, `metrics` = the
    episode's metrics plus "step". Groups share reset seeds as in `run_episodes`."""
    episodes = start_episodes(envs, tasks, group_ids, tokenizer, seed)
    prompts = [list(ep.token_ids) for ep in episodes]
    history: list[list[tuple[list[int], list[int]]]] = [[] for _ in episodes]
    samples: list[list[Trajectory]] = [[] for _ in episodes]
    current = [ep.anchors[-1] if ep.anchors else None for ep in episodes]
    for turn in range(cfg.max_turns):
        live = [i for i, ep in enumerate(episodes) if not ep.done]
        if not live:
            break
        for i in live:
            episodes[i].token_ids = step_context(prompts[i], history[i], cfg)
        completions = act([episodes[i] for i in live], [cfg.max_tokens_per_turn] * len(live), turn)
        texts = [c.text or tokenizer.decode(c.token_ids) for c in completions]
        actions = [fmt.parse(t, c.finish_reason) for t, c in zip(texts, completions, strict=True)]
        results = step_envs([episodes[i].env for i in live], actions)
        for i, completion, text, result in zip(live, completions, texts, results, strict=True):
            ep, context, action_ids = episodes[i], episodes[i].token_ids, list(completion.token_ids)
            n_anchors = len(ep.anchors)
            obs_ids = _record_step(ep, result, fmt, tokenizer, turn == cfg.max_turns - 1)
            mask, logprobs, versions = turn_tokens(completion)
            samples[i].append(
                Trajectory(
                    token_ids=context + action_ids,
                    loss_mask=[0] * len(context) + mask,
                    logprobs=[0.0] * len(context) + logprobs,
                    prompt_length=len(context),
                    policy_version=completion.policy_version,
                    token_versions=[-1] * len(context) + versions,
                    turn_spans=[(len(context), len(context) + len(action_ids))],
                    step_rewards=[ep.step_rewards[-1]],
                    group_id=ep.group_id,
                    task_id=ep.task.task_id,
                    anchors=[] if current[i] is None else [current[i]],
                    completion_text=text,
                )
            )
            history[i].append((action_ids, obs_ids or []))
            current[i] = ep.anchors[-1] if len(ep.anchors) > n_anchors else None
    for ep, steps, past in zip(episodes, samples, history, strict=True):
        truncation_score = end_episode(ep)
        if steps:  # the last step's sample holds a copy of the last step reward
            steps[-1].step_rewards[-1] += truncation_score
        metrics = _episode_metrics(
            ep,
            generated=sum(len(a) for a, _ in past),
            response=sum(len(a) + len(o) for a, o in past),
        )
        for t, sample in enumerate(steps):
            sample.reward = float(sum(ep.step_rewards))
            sample.metrics = {**metrics, "step": float(t)}
        if steps:
            steps[-1].terminated = ep.terminated
            steps[-1].truncated = ep.truncated and not ep.terminated
    return samples

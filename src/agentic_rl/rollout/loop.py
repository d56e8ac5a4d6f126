"""Batched multi-turn episodes: generate -> parse action -> env.step -> append observation.

All live episodes advance one turn together: one `generate` call per turn for the whole batch,
finished episodes leave it. Two modes:
- `run_episodes` (rollout.mode=episode): the context of an episode is a list of token ids that
  only grows: sampled tokens (loss mask 1, with their behaviour logprobs) and inserted tokens
  (loss mask 0); one Trajectory per episode.
- `run_stepwise` (rollout.mode=step, GiGPO): each env step is its own training sample whose
  context is the prompt plus a bounded window of the latest steps (see `step_context`).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config import RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.rollout.chat import ChatFormat, TagFormat, encode_prompt, encode_text
from agentic_rl.types import Action, Completion, SamplingParams, Task, Trajectory

COUNTERS = ("tool_call", "tool_error", "invalid_action", "no_action")


@dataclass
class Episode:
    """The growing state of one episode during a rollout."""

    env: Env
    task: Task
    group_id: str
    token_ids: list[int]
    prompt_length: int
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    anchors: list[Hashable] = field(default_factory=list)
    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    success: float = 0.0
    terminated: bool = False
    truncated: bool = False

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def response_length(self) -> int:
        return len(self.token_ids) - self.prompt_length

    def append(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] = ()) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        self.logprobs.extend(logprobs if generated else [0.0] * len(ids))


# act(live episodes, token budget per episode, turn index) -> one Completion per episode
Actor = Callable[[list[Episode], list[int], int], list[Completion]]


def policy_actor(
    generator: Any, fmt: ChatFormat, cfg: RolloutConfig, seed: int, greedy: bool = False
) -> Actor:
    """Sample each turn from the policy (greedy for evaluation)."""

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        params = [
            SamplingParams(
                max_new_tokens=budget,
                temperature=0.0 if greedy else cfg.temperature,
                top_p=1.0 if greedy else cfg.top_p,
                stop=list(fmt.stop),
                seed=seed * 1000 + turn,
            )
            for budget in budgets
        ]
        return generator.generate([ep.token_ids for ep in episodes], params)

    return act


def expert_actor(fmt: ChatFormat, tokenizer: Any) -> Actor:
    """Play the env's scripted expert (tag-format text) in the target chat format.

    This is demonstration data for the supervised warm start, so tokenising its text is the one
    place model-side tokens come from text; behaviour logprobs are 0 (unused by SFT)."""
    tag_parsers: dict[int, TagFormat] = {}

    def act(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        out = []
        for ep in episodes:
            parser = tag_parsers.setdefault(id(ep.env), TagFormat(ep.env.tools))
            text = ep.env.expert_turn()
            action = parser.parse(text, "stop")
            rendered = fmt.render_action(action) if action.kind in ("tool", "answer") else text
            ids = encode_text(tokenizer, rendered)[: max(budgets[0], 1)]
            out.append(Completion(ids, [0.0] * len(ids), "stop", rendered))
        return out

    return act


def start_episodes(
    envs: Sequence[Env], tasks: Sequence[Task], group_ids: Sequence[str], tokenizer: Any, seed: int
) -> list[Episode]:
    episodes = []
    for i, (env, task, group) in enumerate(zip(envs, tasks, group_ids, strict=True)):
        # Envs of one group share the reset seed, so they start from the same state (GiGPO).
        obs = env.reset(task, seed=seed + (zlib.crc32(group.encode()) % 100_000 if group else i))
        ids = encode_prompt(tokenizer, obs.messages)
        ep = Episode(env=env, task=task, group_id=group, token_ids=ids, prompt_length=len(ids))
        ep.loss_mask = [0] * len(ids)
        ep.logprobs = [0.0] * len(ids)
        if obs.anchor is not None:
            ep.anchors.append(obs.anchor)
        episodes.append(ep)
    return episodes


def _env_step(
    ep: Episode, action: Action, fmt: ChatFormat, tokenizer: Any, last_turn: bool
) -> list[int] | None:
    """Apply `action` to the env and record reward, counters and end flags; returns the
    observation's token ids to insert next, or None when nothing follows (the episode ended)."""
    result = ep.env.step(action)
    ep.step_rewards.append(float(result.reward))
    for key in COUNTERS:
        ep.counts[key] += float(result.info.get(key, 0))
    if "success" in result.info:
        ep.success = float(result.info["success"])
    if result.terminated:
        ep.terminated = True
        return None
    if result.truncated or last_turn:
        ep.truncated = True
        return None
    if result.observation is None:
        return []
    if result.observation.anchor is not None:
        ep.anchors.append(result.observation.anchor)
    return encode_text(tokenizer, fmt.render_observation(result.observation))


def _apply_step(
    ep: Episode,
    action: Action,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    last_turn: bool,
) -> None:
    obs_ids = _env_step(ep, action, fmt, tokenizer, last_turn)
    if obs_ids:
        room = cfg.max_total_tokens - ep.response_length
        # The observation plus at least a few tokens of a next turn must fit the budget.
        if len(obs_ids) + 4 > room:
            ep.truncated = True
            return
        ep.append(obs_ids, generated=False)


def run_episodes(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    seed: int,
) -> list[Trajectory]:
    """Run one episode per (env, task) to the end and return token-native trajectories."""
    episodes = start_episodes(envs, tasks, group_ids, tokenizer, seed)
    for turn in range(cfg.max_turns):
        live = [ep for ep in episodes if not ep.done]
        if not live:
            break
        budgets = [
            min(cfg.max_tokens_per_turn, cfg.max_total_tokens - ep.response_length) for ep in live
        ]
        for ep, budget in zip(live, budgets, strict=True):
            if budget <= 0:
                ep.truncated = True
        live_budgets = [(ep, b) for ep, b in zip(live, budgets, strict=True) if b > 0]
        if not live_budgets:
            break
        live, budgets = [p[0] for p in live_budgets], [p[1] for p in live_budgets]
        completions = act(live, budgets, turn)
        for ep, completion in zip(live, completions, strict=True):
            start = len(ep.token_ids)
            ep.append(completion.token_ids, generated=True, logprobs=completion.logprobs)
            ep.turn_spans.append((start, len(ep.token_ids)))
            text = completion.text or tokenizer.decode(completion.token_ids)
            action = fmt.parse(text, completion.finish_reason)
            _apply_step(ep, action, fmt, tokenizer, cfg, last_turn=turn == cfg.max_turns - 1)
    for ep in episodes:  # budget exhausted without a final step
        if not ep.done:
            ep.truncated = True
    return [_to_trajectory(ep, tokenizer) for ep in episodes]


def _episode_metrics(ep: Episode, generated: int, response: int) -> dict[str, float]:
    return {
        "success": ep.success,
        "turns": float(len(ep.step_rewards)),
        "tool_calls": ep.counts["tool_call"],
        "tool_errors": ep.counts["tool_error"],
        "invalid_actions": ep.counts["invalid_action"],
        "no_action": ep.counts["no_action"],
        "response_tokens": float(response),
        "generated_tokens": float(generated),
        "truncated": float(ep.truncated and not ep.terminated),
    }


def _to_trajectory(ep: Episode, tokenizer: Any) -> Trajectory:
    metrics = _episode_metrics(ep, sum(ep.loss_mask), ep.response_length)
    return Trajectory(
        token_ids=ep.token_ids,
        loss_mask=ep.loss_mask,
        logprobs=ep.logprobs,
        prompt_length=ep.prompt_length,
        turn_spans=ep.turn_spans,
        step_rewards=ep.step_rewards,
        reward=float(sum(ep.step_rewards)),
        group_id=ep.group_id,
        task_id=ep.task.task_id,
        anchors=ep.anchors,
        terminated=ep.terminated,
        truncated=ep.truncated and not ep.terminated,
        metrics=metrics,
        completion_text=tokenizer.decode(ep.token_ids[ep.prompt_length :]),
    )


# ---------------------------------------------------------------------------------------------
# Step-wise mode
# ---------------------------------------------------------------------------------------------


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
        for i, completion in zip(live, completions, strict=True):
            ep, context, action_ids = episodes[i], episodes[i].token_ids, list(completion.token_ids)
            text = completion.text or tokenizer.decode(action_ids)
            n_anchors = len(ep.anchors)
            obs_ids = _env_step(
                ep,
                fmt.parse(text, completion.finish_reason),
                fmt,
                tokenizer,
                turn == cfg.max_turns - 1,
            )
            samples[i].append(
                Trajectory(
                    token_ids=context + action_ids,
                    loss_mask=[0] * len(context) + [1] * len(action_ids),
                    logprobs=[0.0] * len(context) + list(completion.logprobs),
                    prompt_length=len(context),
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
        if not ep.done:
            ep.truncated = True
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

"""Batched multi-turn episodes: generate -> parse action -> env.step -> append observation.

All live episodes advance one turn together: one `generate` call per turn for the whole batch,
finished episodes leave it. The context of an episode is a list of token ids that only grows:
sampled tokens (loss mask 1, with their behaviour logprobs) and inserted tokens (loss mask 0).
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


def _apply_step(
    ep: Episode,
    action: Action,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    last_turn: bool,
) -> None:
    result = ep.env.step(action)
    ep.step_rewards.append(float(result.reward))
    for key in COUNTERS:
        ep.counts[key] += float(result.info.get(key, 0))
    if "success" in result.info:
        ep.success = float(result.info["success"])
    if result.terminated:
        ep.terminated = True
        return
    if result.truncated or last_turn:
        ep.truncated = True
        return
    if result.observation is not None:
        if result.observation.anchor is not None:
            ep.anchors.append(result.observation.anchor)
        obs_ids = encode_text(tokenizer, fmt.render_observation(result.observation))
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


def _to_trajectory(ep: Episode, tokenizer: Any) -> Trajectory:
    generated = sum(ep.loss_mask)
    metrics = {
        "success": ep.success,
        "turns": float(len(ep.turn_spans)),
        "tool_calls": ep.counts["tool_call"],
        "tool_errors": ep.counts["tool_error"],
        "invalid_actions": ep.counts["invalid_action"],
        "no_action": ep.counts["no_action"],
        "response_tokens": float(ep.response_length),
        "generated_tokens": float(generated),
        "truncated": float(ep.truncated and not ep.terminated),
    }
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

"""Batched multi-turn episodes: generate -> parse action -> env.step -> append observation.

All live episodes advance one turn together: one `generate` call per turn for the whole batch,
finished episodes leave it. Two modes:
- `run_episodes` (rollout.mode=episode): the context of an episode is a list of token ids that
  only grows: sampled tokens (loss mask 1, with their behaviour logprobs) and inserted tokens
  (loss mask 0); one Trajectory per episode.
- `run_stepwise` (rollout.mode=step, GiGPO): each env step is its own training sample whose
  context is the prompt plus a bounded window of the latest steps (see `step_context`).

A step whose tools' infrastructure fails (ToolInfrastructureError: a server down or timing out)
is not the model's doing: `step_envs` ends that episode without inserting anything, and its
metrics carry `infra_failed` so the collector replays or drops it (train/collect.py).
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.formats.chat import ChatFormat, TagFormat, with_images
from agentic_rl.model.tokens import encode_prompt, encode_text
from agentic_rl.rollout.think_budget import thinking_prompt
from agentic_rl.tools.base import ToolInfrastructureError
from agentic_rl.types import (
    Action,
    Completion,
    ImageRef,
    SamplingParams,
    StepResult,
    Task,
    Trajectory,
)

COUNTERS = ("tool_call", "tool_error", "invalid_action", "no_action")
ENV_METRIC_PREFIX = "env/"
"""StepResult.info keys that start with it are the env's own episode metrics (e.g. image
planning's `env/optimal_plan`): summed over the episode's steps into the trajectory's metrics
under the same key, and averaged over episodes in evaluations (train/summary.py)."""
INFRA_ERROR = "infra_error"
"""StepResult.info key of a step whose tool infrastructure failed (`step_envs`): the episode
ends there, is marked `infra_failed` in its metrics and is never trained on (train/collect.py
replays it with fresh envs or drops it)."""
# A thought before the action: a whole <think> span, or the opening / closing part of one that
# spans several turns (R1-Searcher searches inside a single think).
_LEADING_THINK = re.compile(r"\s*(?:<think>.*?</think>|<think>[^<]*|[^<]*</think>)\s*", re.DOTALL)


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
    versions: list[int] = field(default_factory=list)  # policy version per token, -1 = inserted
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    anchors: list[Hashable] = field(default_factory=list)
    counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    env_metrics: dict[str, float] = field(default_factory=dict)  # ENV_METRIC_PREFIX keys
    success: float = 0.0
    terminated: bool = False
    truncated: bool = False
    think_mode: str | None = None  # Qwen3 switch of this episode (rollout.thinking_mode)
    infra_error: str = ""  # why the tools' infrastructure failed it (not the model's doing)
    images: list[ImageRef] = field(default_factory=list)  # in placeholder order (VLM policies)
    role: str = ""  # multi-agent conversation envs: the role whose conversation is open

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def response_length(self) -> int:
        return len(self.token_ids) - self.prompt_length

    def append(
        self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] = (), version: int = 0
    ) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        self.logprobs.extend(logprobs if generated else [0.0] * len(ids))
        self.versions.extend([version if generated else -1] * len(ids))

    def append_turn(self, completion: Completion) -> None:
        """A model turn, its tokens marked by `turn_tokens`."""
        mask, logprobs, versions = turn_tokens(completion)
        self.token_ids.extend(completion.token_ids)
        self.loss_mask.extend(mask)
        self.logprobs.extend(logprobs)
        self.versions.extend(versions)


def turn_tokens(completion: Completion) -> tuple[list[int], list[float], list[int]]:
    """(loss mask, behaviour logprobs, policy versions) of a model turn's `token_ids`, one entry
    per token: the sampled ids get mask 1, their logprobs and the completion's policy version;
    the ranges the framework inserted mid-turn (`Completion.inserted`, e.g. the thinking
    budget's stop phrase) get mask 0, logprob 0 and version -1. Every rollout mode marks its
    turns with it, so an inserted token is never trained as the policy's in any mode."""
    c = completion
    mask = [1] * len(c.token_ids)
    logprobs = [float(lp) for lp in c.logprobs[: len(c.token_ids)]]
    logprobs += [0.0] * (len(c.token_ids) - len(logprobs))
    versions = [c.policy_version] * len(c.token_ids)
    for start, end in c.inserted:
        for i in range(start, min(end, len(c.token_ids))):
            mask[i], logprobs[i], versions[i] = 0, 0.0, -1
    return mask, logprobs, versions


# act(live episodes, token budget per episode, turn index) -> one Completion per episode
Actor = Callable[[list[Episode], list[int], int], list[Completion]]


def policy_actor(
    generator: Any,
    fmt: ChatFormat,
    cfg: RolloutConfig,
    seed: int,
    greedy: bool = False,
    tokenizer: Any = None,
) -> Actor:
    """Sample each turn from the policy (greedy for evaluation). With `rollout.think_budget`
    thinking blocks are cut at the budget (rollout/think_budget.py), which reads the turn's
    text with `tokenizer` (default: the generator's)."""
    if cfg.think_budget > 0:
        from agentic_rl.rollout.think_budget import budget_actor

        tokenizer = tokenizer if tokenizer is not None else getattr(generator, "tokenizer", None)
        if tokenizer is None:
            raise ValueError("rollout.think_budget needs the tokenizer: pass it to policy_actor")
        return budget_actor(generator, fmt, cfg, tokenizer, seed, greedy)

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
        prompts = [ep.token_ids for ep in episodes]
        if any(ep.images for ep in episodes):  # a vision-language policy sees the pictures
            return generator.generate(prompts, params, images=[ep.images for ep in episodes])
        return generator.generate(prompts, params)

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
            rendered = text
            if action.kind in ("tool", "answer"):
                # Keep the expert's leading thought: rewards that demand <think> (DeepResearcher,
                # Search-R1, R1-Searcher) must see it in the demonstrations.
                thought = _LEADING_THINK.match(text)
                if ep.think_mode == "no_think":  # the empty thinking block is prefilled
                    thought = None
                rendered = (thought.group(0) if thought else "") + fmt.render_action(action)
            ids = encode_text(tokenizer, rendered)[: max(budgets[0], 1)]
            out.append(Completion(ids, [0.0] * len(ids), "stop", rendered))
        return out

    return act


def start_episodes(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    tokenizer: Any,
    seed: int,
    thinking: str = "off",
    fmt: ChatFormat | None = None,
) -> list[Episode]:
    """Reset the envs and encode their opening messages. `thinking` (rollout.thinking_mode)
    adds Qwen3's /think or /no_think switch; no-think prompts end with the empty thinking block
    (part of the prompt, so loss mask 0). Images of the first observation get `fmt`'s
    placeholders after the last message's text."""
    episodes = []
    for i, (env, task, group) in enumerate(zip(envs, tasks, group_ids, strict=True)):
        # Envs of one group share the reset seed, so they start from the same state (GiGPO).
        obs = env.reset(task, seed=seed + (zlib.crc32(group.encode()) % 100_000 if group else i))
        messages, prefill, mode = thinking_prompt(obs.messages, thinking, task.task_id)
        if obs.images and fmt is None:
            raise ValueError("image observations need the chat format (rollout.mode=episode)")
        messages = with_images(messages, obs.images, getattr(fmt, "image_placeholder", None))
        ids = encode_prompt(tokenizer, messages)
        ids += encode_text(tokenizer, prefill) if prefill else []
        ep = Episode(env=env, task=task, group_id=group, token_ids=ids, prompt_length=len(ids))
        ep.think_mode = mode
        ep.images = list(obs.images)
        ep.role = obs.role
        ep.loss_mask = [0] * len(ids)
        ep.logprobs = [0.0] * len(ids)
        ep.versions = [-1] * len(ids)
        if obs.anchor is not None:
            ep.anchors.append(obs.anchor)
        episodes.append(ep)
    return episodes


def infra_failure(exc: ToolInfrastructureError) -> StepResult:
    """The step of an episode whose tools' infrastructure failed: it ends the episode, and the
    message goes to the collector, never into the model's context."""
    return StepResult(
        observation=None, terminated=True, info={INFRA_ERROR: f"{type(exc).__name__}: {exc}"}
    )


def _guarded(step: Callable[[], StepResult]) -> StepResult:
    try:
        return step()
    except ToolInfrastructureError as exc:
        return infra_failure(exc)


def step_envs(envs: Sequence[Env], actions: Sequence[Action]) -> list[StepResult]:
    """`env.step(action)` for every live episode of a turn, in order. Envs that can start a step
    without waiting for it (remote envs: `start_step(action)` returns a function that waits for
    the result) all start first, so their tool calls run at the same time. A step whose tools'
    infrastructure fails (ToolInfrastructureError) becomes `infra_failure`: it ends only that
    episode."""
    waits: list[Callable[[], StepResult]] = []
    for env, action in zip(envs, actions, strict=True):
        if hasattr(env, "start_step"):
            try:
                waits.append(env.start_step(action))
            except ToolInfrastructureError as exc:
                waits.append(lambda exc=exc: infra_failure(exc))
        else:
            waits.append(lambda env=env, action=action: env.step(action))
    return [_guarded(wait) for wait in waits]


def _env_step(
    ep: Episode, action: Action, fmt: ChatFormat, tokenizer: Any, last_turn: bool
) -> list[int] | None:
    """Apply `action` to the env and record reward, counters and end flags; returns the
    observation's token ids to insert next, or None when nothing follows (the episode ended)."""
    return _record_step(ep, _guarded(lambda: ep.env.step(action)), fmt, tokenizer, last_turn)


def _record_step(
    ep: Episode, result: StepResult, fmt: ChatFormat, tokenizer: Any, last_turn: bool
) -> list[int] | None:
    """`_env_step` for a step already taken (see `step_envs`)."""
    if INFRA_ERROR in result.info:  # not the model's doing: end here, record nothing of it
        ep.infra_error = str(result.info[INFRA_ERROR])
        ep.terminated = True
        # The turn still has its step reward entry (0: the episode is never trained on), so
        # step_rewards stays one per turn and every mode reads this step's as the last one.
        ep.step_rewards.append(0.0)
        print(
            f"tool infrastructure failed in episode of task {ep.task.task_id} "
            f"(group {ep.group_id}): {ep.infra_error}; it is replayed or dropped, never trained on",
            file=sys.stderr,
            flush=True,
        )
        return None
    ep.step_rewards.append(float(result.reward))
    for key in COUNTERS:
        ep.counts[key] += float(result.info.get(key, 0))
    for key, value in result.info.items():
        if key.startswith(ENV_METRIC_PREFIX):
            ep.env_metrics[key] = ep.env_metrics.get(key, 0.0) + float(value)
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


def apply_step(
    ep: Episode,
    result: StepResult,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    last_turn: bool,
) -> None:
    obs_ids = _record_step(ep, result, fmt, tokenizer, last_turn)
    if obs_ids:
        room = cfg.max_total_tokens - ep.response_length
        # The observation plus at least a few tokens of a next turn must fit the budget.
        if len(obs_ids) + 4 > room:
            ep.truncated = True
            return
        ep.append(obs_ids, generated=False)
        if result.observation is not None:  # its placeholders are now in the context
            ep.images.extend(result.observation.images)


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
    episodes = start_episodes(envs, tasks, group_ids, tokenizer, seed, cfg.thinking_mode, fmt)
    for turn in range(cfg.max_turns):
        if not play_turn(episodes, act, fmt, tokenizer, cfg, turn):
            break
    for ep in episodes:
        end_episode(ep)
    return [to_trajectory(ep, tokenizer) for ep in episodes]


def play_turn(
    episodes: Sequence[Episode],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    turn: int,
    act_turn: int | None = None,
) -> list[tuple[Episode, Action, StepResult]]:
    """One turn of every live episode of `episodes`: one `act` call for all of them, their
    actions parsed and stepped, the observations appended. `turn` is the episodes' turn index
    (the last one, rollout.max_turns - 1, truncates); `act_turn` (default `turn`) is the index
    the actor seeds its sampling with (tree rollouts give each round its own). Returns what
    each played episode did, in order; empty when no episode was left to play."""
    live = [ep for ep in episodes if not ep.done]
    budgets = [
        min(cfg.max_tokens_per_turn, cfg.max_total_tokens - ep.response_length) for ep in live
    ]
    for ep, budget in zip(live, budgets, strict=True):
        if budget <= 0:
            ep.truncated = True
    live_budgets = [(ep, b) for ep, b in zip(live, budgets, strict=True) if b > 0]
    if not live_budgets:
        return []
    live, budgets = [p[0] for p in live_budgets], [p[1] for p in live_budgets]
    completions = act(live, budgets, turn if act_turn is None else act_turn)
    actions = []
    for ep, c in zip(live, completions, strict=True):
        start = len(ep.token_ids)
        ep.append_turn(c)
        ep.turn_spans.append((start, len(ep.token_ids)))
        text = c.text or tokenizer.decode(c.token_ids)
        actions.append(fmt.parse(text, c.finish_reason))
    results = step_envs([ep.env for ep in live], actions)
    for ep, result in zip(live, results, strict=True):
        apply_step(ep, result, fmt, tokenizer, cfg, last_turn=turn == cfg.max_turns - 1)
    return list(zip(live, actions, results, strict=True))


def end_episode(ep: Episode) -> float:
    """Close an episode the same way in every rollout mode (episode, step, memory, context
    budget): one the rollout left unfinished (a turn or token budget ran out) is truncated, and
    a truncated one gets its env's `truncation_reward()` (envs that define one) added to its
    last step reward. E.g. an unanswered math problem scores as a wrong answer, so that running
    out of turns cannot beat answering wrongly under ReTool's +1 / -1.

    Returns the score added (0.0 if none), so that a mode whose samples copied the last step's
    reward adds it to that sample's last step reward too. Call it once per episode."""
    if not ep.done:
        ep.truncated = True
    score = getattr(ep.env, "truncation_reward", None)
    if not ep.truncated or ep.terminated or score is None or not ep.step_rewards:
        return 0.0
    added = float(score())
    ep.step_rewards[-1] += added
    return added


def _episode_metrics(ep: Episode, generated: int, response: int) -> dict[str, float]:
    if ep.infra_error:  # only on such episodes, so metric logs of healthy runs do not change
        return {**_base_metrics(ep, generated, response), "infra_failed": 1.0}
    return _base_metrics(ep, generated, response)


def _base_metrics(ep: Episode, generated: int, response: int) -> dict[str, float]:
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
        **ep.env_metrics,
    }


def episode_outcome(ep: Episode) -> dict[str, Any]:
    """The Trajectory fields every sample of a finished episode shares: its return, its group
    and task, and how it ended."""
    return {
        "reward": float(sum(ep.step_rewards)),
        "group_id": ep.group_id,
        "task_id": ep.task.task_id,
        "terminated": ep.terminated,
        "truncated": ep.truncated and not ep.terminated,
    }


def oldest_version(versions: Sequence[int]) -> int:
    """The oldest policy version that sampled any of these tokens (-1 marks non-policy ones)."""
    return min((v for v in versions if v >= 0), default=0)


def to_trajectory(ep: Episode, tokenizer: Any) -> Trajectory:
    return Trajectory(
        token_ids=ep.token_ids,
        loss_mask=ep.loss_mask,
        logprobs=ep.logprobs,
        prompt_length=ep.prompt_length,
        policy_version=oldest_version(ep.versions),
        token_versions=ep.versions,
        turn_spans=ep.turn_spans,
        step_rewards=ep.step_rewards,
        anchors=ep.anchors,
        metrics=_episode_metrics(ep, sum(ep.loss_mask), ep.response_length),
        completion_text=tokenizer.decode(ep.token_ids[ep.prompt_length :]),
        images=list(ep.images),
        **episode_outcome(ep),
    )

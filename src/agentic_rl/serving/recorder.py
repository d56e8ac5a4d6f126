"""Token-native recording of served conversations: calls of one episode -> one Trajectory.

A client resends the whole conversation on every call. The recorder keeps, per episode, the
exact ids of everything so far (prompt and injected messages with loss mask 0, sampled ids with
loss mask 1 and their behaviour logprobs) plus the canonical form of the messages they cover.
The next call must extend those messages: then its prompt is the recorded ids (the previous
completions exactly as sampled, never decoded and re-encoded) followed by the new tool/user
messages rendered by the model's chat template (`template_suffix`) and tokenised on their own,
as the rollout loop inserts observations.

A call that does not extend its episode (the client edited or dropped history, changed the
tools, or resent the same history) cannot reuse the tokens. With `on_mismatch="reject"` it is
refused (409, the first differing message named); with "split" the episode continues in a new
segment, a new training sample whose prompt is the whole conversation rendered by the template
(all loss mask 0), counted in `metrics["segments"]`. Both segments get the episode's reward.

Every sampled token records the policy version that produced it (`Trajectory.token_versions`),
so an episode whose turns straddle an update is trained as stale (decoupled PPO, as the
asynchronous rollouts are). Finished episodes wait for their group: `take_finished` hands out
whole groups with at least `group_size` finished episodes, never part of one (a split group
would compare an episode with only some of its siblings). Episodes nobody finishes expire:
an open episode idle (no call) for `ttl_s` seconds is dropped, and so are the finished episodes
of a group that has not completed and has had no new finish and no live open episode for
`ttl_s` seconds; both are counted in `expired`.
"""

from __future__ import annotations

import threading
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_rl.formats.chat import template_suffix
from agentic_rl.learner.batch import Episodes
from agentic_rl.model.tokens import check_prefix_preserving, encode_prompt, encode_text
from agentic_rl.serving.openai_api import (
    ApiError,
    ChatRequest,
    canonical,
    hermes_format,
    prompt_messages,
    template_message,
)
from agentic_rl.serving.openai_reply import Reply
from agentic_rl.types import Completion, Task, Trajectory

OnMismatch = Literal["reject", "split"]


@dataclass
class Segment:
    """One token-native training sample under construction."""

    token_ids: list[int]
    prompt_length: int
    messages: list[tuple] = field(default_factory=list)  # canonical messages covered
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # policy version of each turn
    token_versions: list[int] = field(default_factory=list)  # per token; -1 where not sampled
    last_finish: str = ""  # finish reason of the latest sampled turn

    def append(
        self,
        ids: list[int],
        generated: bool,
        logprobs: list[float] | None = None,
        version: int = -1,
    ) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([int(generated)] * len(ids))
        self.logprobs.extend(logprobs if generated and logprobs else [0.0] * len(ids))
        self.token_versions.extend([version if generated else -1] * len(ids))


@dataclass
class EpisodeState:
    episode_id: str
    tools_key: str
    group_id: str
    segments: list[Segment] = field(default_factory=list)
    counts: dict[str, float] = field(
        default_factory=lambda: {"turns": 0.0, "tool_calls": 0.0, "invalid_tool_calls": 0.0}
    )
    finished: bool = False
    in_flight: bool = False
    samples: list[Trajectory] = field(default_factory=list)  # set when finished
    last_active: float = 0.0  # recorder clock at the latest call, commit or finish
    role: str = ""  # a team server's role that plays this episode ("" for one policy)

    def summary(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "status": "finished" if self.finished else "open",
            "segments": len(self.segments),
            "tokens": sum(len(s.token_ids) for s in self.segments),
            "group_id": self.group_id,
            **({"role": self.role} if self.role else {}),
            **{k: int(v) for k, v in self.counts.items()},
        }


@dataclass
class PendingCall:
    """A call between `begin` and `commit`/`abort`; nothing is recorded until it commits."""

    episode: EpisodeState
    segment: Segment
    new_segment: bool
    injected: list[int]
    prompt: list[int]
    new_episode: bool


class EpisodeRecorder:
    """Assembles calls into episodes and finished episodes into Trajectories (thread-safe).

    `group_size`: finished episodes a group needs before `take_finished` hands it out (1:
    every finished episode goes at once). `ttl_s` (0: never): idle open episodes and stalled
    incomplete groups expire after it (see the module docstring); `clock` is the time source
    (seconds), replaceable in tests. `frozen_roles`: a team's roles whose episodes are
    recorded with loss mask 0 throughout (they act and never train, as in the rollout)."""

    def __init__(
        self,
        tokenizer: Any,
        on_mismatch: OnMismatch = "reject",
        max_open: int = 10_000,
        group_size: int = 1,
        ttl_s: float = 1800.0,
        clock: Callable[[], float] = time.monotonic,
        frozen_roles: tuple[str, ...] = (),
    ) -> None:
        if on_mismatch not in ("reject", "split"):
            raise ValueError(f"on_mismatch must be 'reject' or 'split', got {on_mismatch!r}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if ttl_s < 0:
            raise ValueError(f"ttl_s must be >= 0 (0: episodes never expire), got {ttl_s}")
        # Splicing sampled ids and template text is only faithful on a prefix-preserving
        # template; anything else is refused here, before any call is served.
        check_prefix_preserving(tokenizer)
        self.tokenizer = tokenizer
        self.on_mismatch = on_mismatch
        self.max_open = max_open
        self.group_size = group_size
        self.ttl_s = ttl_s
        self.clock = clock
        self.frozen_roles = frozen_roles  # a team's roles that act but never train
        self.episodes: dict[str, EpisodeState] = {}
        self.finished: list[tuple[str, list[Trajectory]]] = []  # not yet taken, finish order
        self.expired = {"open": 0, "waiting": 0}  # episodes dropped by the TTL, by state
        self._lock = threading.Lock()

    # -- calls ----------------------------------------------------------------------------------

    def begin(self, request: ChatRequest, role: str = "") -> PendingCall:
        """The prompt ids of this call; raises ApiError 409 when it cannot extend its episode.
        `role`: the team role the call is generated as; an episode is played by one role."""
        with self._lock:
            self._expire()
            episode, new_episode = self._episode_for(request, role)
            if episode.in_flight:
                raise ApiError(f"episode {episode.episode_id!r} has a call in flight", 409)
            call = self._extend(episode, request)
            call.new_episode = new_episode
            episode.in_flight = True
            episode.last_active = self.clock()
            if new_episode:
                self.episodes[episode.episode_id] = episode
            return call

    def commit(self, call: PendingCall, completion: Completion, reply: Reply, version: int) -> None:
        """Record the injected ids (mask 0) and the sampled ids (mask 1, behaviour logprobs)."""
        with self._lock:
            seg, ep = call.segment, call.episode
            if call.new_segment:
                ep.segments.append(seg)
            seg.append(call.injected, generated=False)
            start = len(seg.token_ids)
            seg.append(list(completion.token_ids), True, list(completion.logprobs), version)
            seg.turn_spans.append((start, len(seg.token_ids)))
            seg.versions.append(version)
            seg.last_finish = completion.finish_reason
            seg.messages.append(canonical(reply.message()))
            ep.counts["turns"] += 1
            ep.counts["tool_calls"] += len(reply.tool_calls)
            ep.counts["invalid_tool_calls"] += bool(reply.invalid_tool_call)
            ep.in_flight = False
            ep.last_active = self.clock()

    def abort(self, call: PendingCall) -> None:
        """The call failed before sampling: forget it (a new episode is dropped entirely)."""
        with self._lock:
            call.episode.in_flight = False
            if call.new_episode:
                self.episodes.pop(call.episode.episode_id, None)

    def _episode_for(self, request: ChatRequest, role: str) -> tuple[EpisodeState, bool]:
        if request.episode_id is not None:
            found = self.episodes.get(request.episode_id)
            if found is not None and found.finished:
                raise ApiError(f"episode {request.episode_id!r} is already finished", 409)
            if found is not None and found.role != role:
                raise ApiError(
                    f"episode {request.episode_id!r} is played by role {found.role!r}, not "
                    f"{role!r}: each role's conversation is an episode of its own",
                    409,
                    param="model",
                )
            if found is not None:
                return found, False
        else:
            found = self._match_prefix(request, role)
            if found is not None:
                return found, False
        if sum(not e.finished for e in self.episodes.values()) >= self.max_open:
            expiry = f"; idle ones expire after {self.ttl_s:g} s" if self.ttl_s else ""
            raise ApiError(f"{self.max_open} episodes are open: finish or delete some{expiry}", 429)
        episode_id = request.episode_id or f"ep-{uuid.uuid4().hex[:16]}"
        return EpisodeState(episode_id, request.tools_key(), group_id="", role=role), True

    def _match_prefix(self, request: ChatRequest, role: str) -> EpisodeState | None:
        """The open episode of `role` whose recorded conversation the request extends (longest
        first)."""
        wanted = [canonical(m) for m in request.messages]
        best, best_len = None, 0
        for ep in self.episodes.values():
            if (
                ep.finished
                or ep.in_flight
                or ep.role != role
                or ep.tools_key != request.tools_key()
            ):
                continue
            known = ep.segments[-1].messages
            if best_len < len(known) < len(wanted) and wanted[: len(known)] == known:
                best, best_len = ep, len(known)
        return best

    def _extend(self, ep: EpisodeState, request: ChatRequest) -> PendingCall:
        fmt = hermes_format(request, self.tokenizer)
        wanted = [canonical(m) for m in request.messages]
        if ep.segments:
            seg = ep.segments[-1]
            problem = self._mismatch(ep, seg, request, wanted)
            if problem is None:
                new = [template_message(m, fmt) for m in request.messages[len(seg.messages) :]]
                injected = encode_text(self.tokenizer, self._suffix(seg, new))
                return PendingCall(ep, seg, False, injected, seg.token_ids + injected, False)
            if self.on_mismatch == "reject":
                raise ApiError(
                    f"the messages do not extend episode {ep.episode_id!r}: {problem}; its "
                    "recorded tokens cannot be reused (start a new episode id)",
                    409,
                    param="messages",
                )
        prompt = encode_prompt(self.tokenizer, prompt_messages(request, fmt))
        seg = Segment(token_ids=list(prompt), prompt_length=len(prompt), messages=list(wanted))
        seg.loss_mask, seg.logprobs = [0] * len(prompt), [0.0] * len(prompt)
        seg.token_versions = [-1] * len(prompt)
        if not ep.group_id:  # episodes of one role opening with the same prompt: a GRPO group
            ep.group_id = f"prompt-{zlib.crc32(str(prompt).encode()):08x}"
            ep.group_id += f"-{ep.role}" if ep.role else ""
        return PendingCall(ep, seg, True, [], list(prompt), False)

    @staticmethod
    def _mismatch(ep: EpisodeState, seg: Segment, request: ChatRequest, wanted: list) -> str | None:
        if request.tools_key() != ep.tools_key:
            return "the tools differ from the episode's"
        known = seg.messages
        for i, (have, got) in enumerate(zip(known, wanted, strict=False)):
            if have != got:
                return f"message {i} ({got[0]}) differs from the recorded one ({have[0]})"
        if len(wanted) <= len(known):
            return f"{len(wanted)} messages do not go past the {len(known)} recorded"
        return None

    def _suffix(self, seg: Segment, new: list[dict[str, str]]) -> str:
        """Template text closing the last assistant turn and adding `new`. If the model itself
        ended its turn with the end-of-turn token, that token is not inserted a second time."""
        text = template_suffix(self.tokenizer, new)
        if seg.last_finish == "eos":
            end = self.tokenizer.decode([seg.token_ids[-1]])
            if text.startswith(end):
                text = text[len(end) :]
        return text

    # -- episodes -------------------------------------------------------------------------------

    def finish(
        self,
        episode_id: str,
        reward: float,
        *,
        step_rewards: list[float] | None = None,
        group_id: str | None = None,
        task_id: str | None = None,
        success: float | None = None,
        truncated: bool = False,
    ) -> list[Trajectory]:
        """Close an episode with its reward; its samples (one per segment) are queued for
        `take_finished`. `step_rewards` has one entry per model turn (default: all on the
        last turn, as an outcome reward)."""
        with self._lock:
            ep = self.episodes.get(episode_id)
            if ep is None:
                raise ApiError(f"no episode {episode_id!r}", 404)
            if ep.finished or ep.in_flight:
                state = "already finished" if ep.finished else "has a call in flight"
                raise ApiError(f"episode {episode_id!r} {state}", 409)
            turns = int(ep.counts["turns"])
            steps = list(step_rewards) if step_rewards is not None else [0.0] * turns
            if len(steps) != turns:
                raise ApiError(f"step_rewards has {len(steps)} entries, the episode has {turns}")
            if step_rewards is None and steps:
                steps[-1] = reward
            ep.group_id = group_id or ep.group_id
            samples = self._samples(ep, reward, steps, task_id or episode_id, success, truncated)
            ep.finished, ep.samples, ep.segments = True, samples, []
            ep.last_active = self.clock()
            self.finished.append((episode_id, samples))
            return samples

    def _samples(
        self,
        ep: EpisodeState,
        reward: float,
        steps: list[float],
        task_id: str,
        success: float | None,
        truncated: bool,
    ) -> list[Trajectory]:
        versions = [v for seg in ep.segments for v in seg.versions]
        metrics = {
            "success": float(reward > 0) if success is None else float(success),
            "turns": ep.counts["turns"],
            "tool_calls": ep.counts["tool_calls"],
            "tool_errors": 0.0,
            "invalid_actions": ep.counts["invalid_tool_calls"],
            "no_action": 0.0,
            "generated_tokens": float(sum(sum(s.loss_mask) for s in ep.segments)),
            "response_tokens": float(sum(len(s.token_ids) - s.prompt_length for s in ep.segments)),
            "truncated": float(truncated),
            "segments": float(len(ep.segments)),
            "policy_version_span": float(max(versions) - min(versions)) if versions else 0.0,
        }
        out, used = [], 0
        for seg in ep.segments:
            n = len(seg.turn_spans)
            out.append(
                Trajectory(
                    token_ids=seg.token_ids,
                    # a frozen role (rollout.train_roles leaves it out) acts, never trains
                    loss_mask=[0] * len(seg.loss_mask)
                    if ep.role in self.frozen_roles
                    else seg.loss_mask,
                    logprobs=seg.logprobs,
                    prompt_length=seg.prompt_length,
                    turn_spans=list(seg.turn_spans),
                    step_rewards=steps[used : used + n],
                    reward=float(reward),
                    group_id=ep.group_id,
                    task_id=task_id,
                    role=ep.role,
                    policy_version=min(seg.versions) if seg.versions else 0,
                    token_versions=list(seg.token_versions),
                    terminated=not truncated,
                    truncated=truncated,
                    metrics=dict(metrics),
                    completion_text=self.tokenizer.decode(seg.token_ids[seg.prompt_length :]),
                )
            )
            used += n
        return out

    def discard(self, episode_id: str) -> None:
        with self._lock:
            ep = self.episodes.get(episode_id)
            if ep is None:
                raise ApiError(f"no episode {episode_id!r}", 404)
            if ep.in_flight:
                raise ApiError(f"episode {episode_id!r} has a call in flight", 409)
            del self.episodes[episode_id]

    def take_finished(self, limit: int | None = None) -> Episodes:
        """Pop the finished episodes of complete groups as trainer `Episodes`, group by group:
        the samples of each episode plus a Task naming it (prompt text is not kept; only trr_pp
        reads tasks). A group is complete with at least `group_size` finished episodes; groups
        go whole, in the order they completed, while the total stays within `limit` (the first
        one always goes). The rest wait."""
        with self._lock:
            self._expire()
            chosen: list[int] = []
            for rows in self._complete_groups():
                if limit is not None and chosen and len(chosen) + len(rows) > limit:
                    break
                chosen += rows
            taken = [self.finished[i] for i in chosen]
            keep = set(range(len(self.finished))) - set(chosen)
            self.finished = [self.finished[i] for i in sorted(keep)]
            for episode_id, _ in taken:
                self.episodes.pop(episode_id, None)
        tasks = [Task(task_id=samples[0].task_id, prompt="") for _, samples in taken]
        return Episodes([samples for _, samples in taken], tasks)

    def ready(self) -> int:
        """How many finished episodes `take_finished()` could hand out now."""
        with self._lock:
            self._expire()
            return sum(len(rows) for rows in self._complete_groups())

    def _groups(self) -> dict[str, list[int]]:
        """Indices into `finished` per group id, in finish order."""
        groups: dict[str, list[int]] = {}
        for i, (_, samples) in enumerate(self.finished):
            groups.setdefault(samples[0].group_id, []).append(i)
        return groups

    def _complete_groups(self) -> list[list[int]]:
        """The groups with >= group_size finished episodes, ordered by when they completed."""
        n = self.group_size
        return sorted(
            (rows for rows in self._groups().values() if len(rows) >= n), key=lambda r: r[n - 1]
        )

    def _expire(self) -> None:
        """Drop idle open episodes and stalled incomplete groups (`ttl_s`; lock held). Complete
        groups never expire: they wait for training."""
        if not self.ttl_s:
            return
        cutoff = self.clock() - self.ttl_s
        for ep in list(self.episodes.values()):
            if not ep.finished and not ep.in_flight and ep.last_active < cutoff:
                del self.episodes[ep.episode_id]
                self.expired["open"] += 1
        live = {ep.group_id for ep in self.episodes.values() if not ep.finished}
        stalled: set[int] = set()
        for group, rows in self._groups().items():
            if len(rows) >= self.group_size or group in live:
                continue
            if max(self._finished_at(i) for i in rows) < cutoff:
                stalled.update(rows)
        if stalled:
            for i in stalled:
                self.episodes.pop(self.finished[i][0], None)
            self.finished = [f for i, f in enumerate(self.finished) if i not in stalled]
            self.expired["waiting"] += len(stalled)

    def _finished_at(self, index: int) -> float:
        ep = self.episodes.get(self.finished[index][0])
        return ep.last_active if ep is not None else float("-inf")

    def summaries(self) -> list[dict[str, Any]]:
        with self._lock:
            self._expire()
            return [ep.summary() for ep in self.episodes.values()]

    def get(self, episode_id: str) -> EpisodeState:
        with self._lock:
            ep = self.episodes.get(episode_id)
            if ep is None:
                raise ApiError(
                    f"no episode {episode_id!r} (unknown, deleted, taken or expired)", 404
                )
            return ep

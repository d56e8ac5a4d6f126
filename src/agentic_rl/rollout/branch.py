"""Branching an episode: what both tree rollouts share (Tree-GRPO's rounds in rollout/tree.py,
ARPO's entropy-triggered branching in rollout/arpo.py).

A tree is grown from `Leaf`s, each an episode with what its turns did. A branch (`branch_leaf`)
copies its parent's prefix exactly: token ids, loss mask, behaviour logprobs and policy
versions of the shared turns and observations, never re-sampled or re-tokenised. Its env
reaches the branch point by deterministic replay (reset with the parent's seed, then the
parent's recorded actions; the replayed observations must give the parent's tokens again, else
the rollout stops with `ReplayDivergedError` naming the env) or, for an env with `fork()`, from
a copy taken at that turn boundary while the parent was played (`play_leaves_turn` keeps one
after every turn).

The generator is asked for the continuation of the whole shared prefix; branches of one node
played in one `act` call are one prompt to it (the HF generator prefills identical prompts
once). The HF generator keeps the KV of each finished row across calls and reuses the longest
prefix a prompt shares with one, cut to that length (backends/kv_store.py), so a branch's
prompt, its parent's tokens up to the node, is prefilled in one token: the rest is its parent's
KV, kept from the parent's last turn while the tree is played (backends/base.py gives a tree
rollout's store room for its B x G episodes). bench/tree_rollout_work.py counts the prefill and
decoded tokens; bench/tree_rollouts.py logs decoded and reused prompt tokens per step."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.base import Env
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.episode import Episode, to_trajectory
from agentic_rl.rollout.loop import apply_step, end_episode, play_turn, start_episodes, step_envs
from agentic_rl.types import Action, StepResult, Trajectory, TreePosition


class ReplayDivergedError(RuntimeError):
    """Replaying an episode's actions did not reproduce its observations: the env is not
    deterministic under replay and must declare `branchable = False` (or define `fork()`)."""


@dataclass
class Leaf:
    """One leaf of a tree while it is played: its episode, what each of its turns did (the
    parent's shared turns included) and, for envs with `fork()`, its env after each turn."""

    episode: Episode
    position: TreePosition
    start: Episode
    """The episode as reset left it (the prompt), without its env: what a fork-path branch
    starts from."""
    actions: list[Action] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    forks: dict[int, Env] = field(default_factory=dict)
    """Copies of the env after turn k (k turns played), where the env defines `fork()`."""
    entropy: dict[int, float] = field(default_factory=dict)
    """branch=entropy: ARPO's entropy of turn k (`arpo_turn_entropy`), for the turns this leaf
    played and those it copied (turn 0 is the episode's initial entropy)."""

    def nodes(self) -> list[int]:
        """This leaf's own expandable nodes: turn boundaries k (k turns played, the
        observation after turn k inserted) after its branch point where its episode went on."""
        return list(range(self.position.shared_turns + 1, len(self.episode.turn_spans)))


def prompt_copy(ep: Episode) -> Episode:
    """The episode before its first turn, with lists of its own (the env is kept only as a
    reference: a branch replaces it)."""
    mutable = {
        f.name: copy.copy(getattr(ep, f.name))
        for f in dataclasses.fields(ep)
        if isinstance(getattr(ep, f.name), (list, dict))
    }
    return dataclasses.replace(ep, **mutable)


def play_leaves_turn(
    leaves: Sequence[Leaf],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    turn: int,
    act_turn: int,
) -> list[Leaf]:
    """One turn (index `turn`) of the leaves' live episodes in one `act` call (`play_turn`);
    records each played leaf's action, result and (fork-capable envs) its env after the turn.
    Returns the leaves that played."""
    by_episode = {id(leaf.episode): leaf for leaf in leaves}
    played = play_turn(
        [leaf.episode for leaf in leaves], act, fmt, tokenizer, cfg, turn, act_turn=act_turn
    )
    out = []
    for ep, action, result in played:
        leaf = by_episode[id(ep)]
        leaf.actions.append(action)
        leaf.results.append(result)
        if not ep.done and callable(getattr(ep.env, "fork", None)):
            leaf.forks[len(ep.turn_spans)] = ep.env.fork()
        out.append(leaf)
    return out


def branch_leaf(
    parent: Leaf,
    k: int,
    env: Env,
    position: TreePosition,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    seed: int,
) -> Leaf:
    """A new leaf that shares `parent`'s first `k` turns: its env brought to the node by a
    fork (where the parent kept one) or by replaying the parent's actions on `env`, its tokens
    copied from the parent. Raises ReplayDivergedError when replay does not reproduce them."""
    source = parent.episode
    forked = parent.forks.get(k)
    if forked is not None:
        ep = dataclasses.replace(prompt_copy(parent.start), env=forked.fork())
    else:
        ep = start_episodes(
            [env], [source.task], [source.group_id], tokenizer, seed, cfg.thinking_mode, fmt
        )[0]
    for i in range(k):
        start, end = source.turn_spans[i]
        if ep.token_ids != source.token_ids[:start]:
            _diverged(source, env, i)
        ep.token_ids.extend(source.token_ids[start:end])
        ep.loss_mask.extend(source.loss_mask[start:end])
        ep.logprobs.extend(source.logprobs[start:end])
        ep.versions.extend(source.versions[start:end])
        ep.turn_spans.append((start, end))
        if forked is not None:
            result = parent.results[i]
        else:
            result = step_envs([ep.env], [parent.actions[i]])[0]
        apply_step(ep, result, fmt, tokenizer, cfg, last_turn=False)
        if ep.infra_error:  # the replay's tools failed: the episode ends, marked, untrained
            break
    expected = source.token_ids[: position.shared_tokens]
    if not ep.infra_error and (ep.done or ep.token_ids != expected):
        _diverged(source, env, k - 1)
    # The branch's own nodes come after k: the parent's env copies are not needed by it.
    actions, results = list(parent.actions[:k]), list(parent.results[:k])
    entropy = {t: h for t, h in parent.entropy.items() if t < k}
    return Leaf(ep, position, parent.start, actions=actions, results=results, entropy=entropy)


def node_tokens(ep: Episode, k: int) -> int:
    """Tokens of `ep` up to node k: the prompt and its first k turns with their observations
    (where its turn k + 1 starts)."""
    return ep.turn_spans[k][0] if k else ep.prompt_length


def _diverged(source: Episode, env: Env, turn: int) -> None:
    raise ReplayDivergedError(
        f"tree rollout: replaying the episode of task {source.task.task_id} on "
        f"{type(env).__name__} did not reproduce its context after turn {turn + 1}: the env is "
        "not deterministic under replay (same reset seed, same actions). Declare "
        "`branchable = False` on it (tree rollouts are then refused) or give it a fork()"
    )


def tree_samples(leaf_of: dict[int, Leaf], tokenizer: Any) -> list[list[Trajectory]]:
    """Every slot's leaf, closed, as its one training sample with its tree position."""
    out = []
    for i in range(len(leaf_of)):
        leaf = leaf_of[i]
        end_episode(leaf.episode)
        trajectory = to_trajectory(leaf.episode, tokenizer)
        trajectory.tree = leaf.position
        out.append([trajectory])
    return out

"""Tree-shaped rollouts (rollout.tree): Tree-GRPO's agent-step trees, played with the episode
loop of loop.py.

Tree-GRPO (Ji et al. 2025, arXiv 2509.21240) replaces a task's G independent episodes by M
trees whose nodes are whole agent steps (model turn, action, observation). Here:

1. M root episodes per task are played to the end (`play_turn`, as `run_episodes` does);
2. L times, N nodes of each tree are chosen at random among its turn boundaries after an
   observation where the episode went on (never a node a leaf copied from its parent; a tree
   without any such node branches from its prompt), and each is continued to the end as a new
   leaf, all branches of the batch in one episode loop;
3. every leaf is a training sample with its `TreePosition`; the group is the task's leaves
   (rollout.group_size = M x (1 + L x N)), the tree is what `tree_grpo` normalises within.

A branch copies its parent's prefix exactly: token ids, loss mask, behaviour logprobs and policy
versions of the shared turns and observations, never re-sampled or re-tokenised. Its env reaches
the branch point by deterministic replay (reset with the parent's seed, then the parent's
recorded actions; the replayed observations must give the parent's tokens again, else the
rollout stops and names the env) or, for an env with `fork()`, from a copy taken at that turn
boundary while the parent was played. Each round samples with its own seeds (the actor's turn
index is turn + round x max_turns), so a branch is not its parent's continuation re-drawn.

The generator is asked for the continuation of the whole shared prefix; branches of one node in
one round are one prompt to it (the HF generator prefills identical prompts once), and its KV of
earlier calls is not kept across rounds, so a branch's prefix is prefilled once per round
(bench/tree_rollouts.py measures the prefill and decoded tokens).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.base import Env, is_branchable
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.loop import (
    Actor,
    Episode,
    apply_step,
    end_episode,
    play_turn,
    start_episodes,
    step_envs,
    to_trajectory,
)
from agentic_rl.types import Action, StepResult, Task, Trajectory, TreePosition


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

    def nodes(self) -> list[int]:
        """This leaf's own expandable nodes: turn boundaries k (k turns played, the
        observation after turn k inserted) after its branch point where its episode went on."""
        return list(range(self.position.shared_turns + 1, len(self.episode.turn_spans)))


def _prompt_copy(ep: Episode) -> Episode:
    """The episode before its first turn, with lists of its own (the env is kept only as a
    reference: a branch replaces it)."""
    mutable = {
        f.name: copy.copy(getattr(ep, f.name))
        for f in dataclasses.fields(ep)
        if isinstance(getattr(ep, f.name), (list, dict))
    }
    return dataclasses.replace(ep, **mutable)


def _play(
    leaves: Sequence[Leaf],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    round_index: int,
) -> None:
    """Play the leaves to their end, each from its own turn; record their actions, results
    and (fork-capable envs) their env after every turn."""
    by_episode = {id(leaf.episode): leaf for leaf in leaves}
    first = min((len(leaf.episode.turn_spans) for leaf in leaves), default=cfg.max_turns)
    for turn in range(first, cfg.max_turns):
        ready = [leaf.episode for leaf in leaves if len(leaf.episode.turn_spans) <= turn]
        played = play_turn(
            ready, act, fmt, tokenizer, cfg, turn, act_turn=turn + round_index * cfg.max_turns
        )
        for ep, action, result in played:
            leaf = by_episode[id(ep)]
            leaf.actions.append(action)
            leaf.results.append(result)
            if not ep.done and callable(getattr(ep.env, "fork", None)):
                leaf.forks[len(ep.turn_spans)] = ep.env.fork()


def _branch(
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
        ep = dataclasses.replace(_prompt_copy(parent.start), env=forked.fork())
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
    return Leaf(ep, position, parent.start, actions=actions, results=results)


def _node_tokens(ep: Episode, k: int) -> int:
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


def choose_nodes(leaves: Sequence[Leaf], n: int, rng: random.Random) -> list[tuple[Leaf, int]]:
    """`n` nodes of one tree to expand (Tree-GRPO's random expansion): distinct nodes while
    there are enough, then repeats; a tree without any expandable node branches from its
    prompt (node 0 of its root: a fresh episode that shares only the prompt)."""
    candidates = [(leaf, k) for leaf in leaves for k in leaf.nodes()]
    if not candidates:
        return [(leaves[0], 0)] * n
    if len(candidates) >= n:
        return rng.sample(candidates, n)
    return candidates + rng.choices(candidates, k=n - len(candidates))


def run_tree_episodes(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    seed: int,
) -> list[list[Trajectory]]:
    """Play each group's slots as rollout.tree.roots trees (see the module docstring); one
    sample per slot, in the order given. A group's slots (the same task) number exactly
    roots x (1 + iterations x expansions); its first `roots` slots are the root episodes, the
    others are filled by branches in order of round, tree and expansion, each on its slot's
    env."""
    tree = cfg.tree
    per_tree = 1 + tree.iterations * tree.expansions
    slots: dict[str, list[int]] = {}
    for i, group in enumerate(group_ids):
        slots.setdefault(group, []).append(i)
    for group, members in slots.items():
        if len(members) != tree.roots * per_tree:
            raise ValueError(
                f"group {group} has {len(members)} episodes; rollout.tree needs roots x (1 + "
                f"iterations x expansions) = {tree.roots * per_tree}"
            )
    for env in envs:
        if not is_branchable(env):
            raise ValueError(f"{type(env).__name__} declares branchable = False: no tree rollout")
    leaf_of: dict[int, Leaf] = {}
    trees: dict[tuple[str, int], list[Leaf]] = {}
    roots = [i for members in slots.values() for i in members[: tree.roots]]
    started = start_episodes(
        [envs[i] for i in roots],
        [tasks[i] for i in roots],
        [group_ids[i] for i in roots],
        tokenizer,
        seed,
        cfg.thinking_mode,
        fmt,
    )
    for i, ep in zip(roots, started, strict=True):
        r = slots[group_ids[i]].index(i)
        position = TreePosition(tree_id=f"{group_ids[i]}#{r}", leaf=0)
        leaf_of[i] = Leaf(ep, position, _prompt_copy(ep))
        trees[(group_ids[i], r)] = [leaf_of[i]]
    _play([leaf_of[i] for i in roots], act, fmt, tokenizer, cfg, round_index=0)
    for round_index in range(1, tree.iterations + 1):
        branches: list[Leaf] = []
        grown: dict[tuple[str, int], list[Leaf]] = {}
        for (group, r), leaves in trees.items():
            rng = random.Random(f"{seed}:{group}:{r}:{round_index}")
            chosen = choose_nodes(leaves, tree.expansions, rng)
            for n, (parent, k) in enumerate(chosen):
                first = tree.roots + ((round_index - 1) * tree.roots + r) * tree.expansions
                slot = slots[group][first + n]
                position = TreePosition(
                    tree_id=parent.position.tree_id,
                    leaf=len(leaves) + n,
                    parent=parent.position.leaf,
                    shared_turns=k,
                    shared_tokens=_node_tokens(parent.episode, k),
                )
                leaf_of[slot] = _branch(parent, k, envs[slot], position, fmt, tokenizer, cfg, seed)
                branches.append(leaf_of[slot])
                grown.setdefault((group, r), []).append(leaf_of[slot])
        _play(branches, act, fmt, tokenizer, cfg, round_index)
        for key, new in grown.items():
            trees[key].extend(new)
    out = []
    for i in range(len(envs)):
        leaf = leaf_of[i]
        end_episode(leaf.episode)
        trajectory = to_trajectory(leaf.episode, tokenizer)
        trajectory.tree = leaf.position
        out.append([trajectory])
    return out


def decoded_tokens(trajectory: Trajectory) -> int:
    """The tokens the generator sampled for this sample itself: its loss-mask-1 tokens after
    the prefix it copied from its parent (all of them outside a tree)."""
    shared = trajectory.tree.shared_tokens if trajectory.tree is not None else 0
    return sum(trajectory.loss_mask[shared:])


def distinct_trajectories(samples: Sequence[Trajectory]) -> int:
    """How many of the samples differ in their token ids (two leaves that sampled the same
    continuation are one trajectory)."""
    return len({tuple(s.token_ids) for s in samples})

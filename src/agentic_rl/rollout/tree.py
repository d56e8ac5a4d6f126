"""Tree-shaped rollouts (rollout.tree), played with the episode loop of loop.py: the entry
point `run_tree_episodes`, which plays Tree-GRPO's agent-step trees here (branch=random) and
ARPO's entropy-triggered branching in arpo.py (branch=entropy); both branch with branch.py
(exact prefix copy, replay or fork of the env, the generator's reuse of the shared prefix).

Tree-GRPO (Ji et al. 2025, arXiv 2509.21240) replaces a task's G independent episodes by M
trees whose nodes are whole agent steps (model turn, action, observation). Here:

1. M root episodes per task are played to the end (`play_turn`, as `run_episodes` does);
2. L times, N nodes of each tree are chosen at random among its turn boundaries after an
   observation where the episode went on (never a node a leaf copied from its parent; a tree
   without any such node branches from its prompt), and each is continued to the end as a new
   leaf, all branches of the batch in one episode loop;
3. every leaf is a sample with its `TreePosition`; the group is the task's leaves
   (rollout.group_size = M x (1 + L x N)), the tree is what the tree_grpo estimators
   normalise within. With rollout.tree.train_leaves = K, K leaves of each tree are drawn to
   train (`train_leaf_indices`, called by train/collect.py once the batch is played).

Each round samples with its own seeds (the actor's turn index is turn + round x max_turns), so
a branch is not its parent's continuation re-drawn.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.envs.base import Env, is_branchable
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.arpo import run_entropy_trees
from agentic_rl.rollout.branch import (
    Leaf,
    branch_leaf,
    node_tokens,
    play_leaves_turn,
    prompt_copy,
    tree_samples,
)
from agentic_rl.rollout.loop import start_episodes
from agentic_rl.types import Task, Trajectory, TreePosition


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
    first = min((len(leaf.episode.turn_spans) for leaf in leaves), default=cfg.max_turns)
    for turn in range(first, cfg.max_turns):
        ready = [leaf for leaf in leaves if len(leaf.episode.turn_spans) <= turn]
        play_leaves_turn(ready, act, fmt, tokenizer, cfg, turn, turn + round_index * cfg.max_turns)


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
    """Play each group's slots as trees (the module docstring; arpo.py's for branch=entropy);
    one sample per slot, in the order given. Its first rollout.tree.roots slots are the root
    episodes. branch=random: a group's slots (the same task) number exactly roots x (1 +
    iterations x expansions), the others filled by branches in order of round, tree and
    expansion, each on its slot's env. branch=entropy: a group has more slots than roots (its
    budget M), filled by branches and fresh roots in the order they start."""
    tree = cfg.tree
    slots: dict[str, list[int]] = {}
    for i, group in enumerate(group_ids):
        slots.setdefault(group, []).append(i)
    for env in envs:
        if not is_branchable(env):
            raise ValueError(f"{type(env).__name__} declares branchable = False: no tree rollout")
    if tree.branch == "entropy":
        return run_entropy_trees(envs, tasks, group_ids, slots, act, fmt, tokenizer, cfg, seed)
    per_tree = 1 + tree.iterations * tree.expansions
    for group, members in slots.items():
        if len(members) != tree.roots * per_tree:
            raise ValueError(
                f"group {group} has {len(members)} episodes; rollout.tree needs roots x (1 + "
                f"iterations x expansions) = {tree.roots * per_tree}"
            )
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
        leaf_of[i] = Leaf(ep, position, prompt_copy(ep))
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
                    shared_tokens=node_tokens(parent.episode, k),
                )
                leaf_of[slot] = branch_leaf(
                    parent, k, envs[slot], position, fmt, tokenizer, cfg, seed
                )
                branches.append(leaf_of[slot])
                grown.setdefault((group, r), []).append(leaf_of[slot])
        _play(branches, act, fmt, tokenizer, cfg, round_index)
        for key, new in grown.items():
            trees[key].extend(new)
    return tree_samples(leaf_of, tokenizer)


def train_leaf_indices(samples: Sequence[Sequence[Trajectory]], k: int, seed: int) -> list[int]:
    """The episodes that train under Tree-GRPO's leaf subsampling: `k` leaves of each tree,
    drawn uniformly without replacement (the reference shuffles a tree's leaves and keeps the
    first K, `tree_node.py` `sample_leaf`), seeded by the rollout's seed and the tree; a tree
    with at most `k` leaves keeps them all, an episode outside any tree is kept. Indices into
    `samples` (one list per episode, a tree leaf's one sample first), in their order."""
    trees: dict[str, list[int]] = {}
    keep: list[int] = []
    for i, episode in enumerate(samples):
        position = episode[0].tree
        if position is None:
            keep.append(i)
        else:
            trees.setdefault(position.tree_id, []).append(i)
    for tree_id, leaves in trees.items():
        rng = random.Random(f"{seed}:{tree_id}:train")
        keep += leaves if len(leaves) <= k else rng.sample(leaves, k)
    return sorted(keep)


def decoded_tokens(trajectory: Trajectory) -> int:
    """The tokens the generator sampled for this sample itself: its loss-mask-1 tokens after
    the prefix it copied from its parent (all of them outside a tree)."""
    shared = trajectory.tree.shared_tokens if trajectory.tree is not None else 0
    return sum(trajectory.loss_mask[shared:])


def distinct_trajectories(samples: Sequence[Trajectory]) -> int:
    """How many of the samples differ in their token ids (two leaves that sampled the same
    continuation are one trajectory)."""
    return len({tuple(s.token_ids) for s in samples})

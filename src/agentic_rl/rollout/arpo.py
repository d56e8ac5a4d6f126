"""ARPO's entropy-triggered branching (Dong et al. 2025, arXiv 2507.19849;
rollout.tree.branch=entropy): trees grown while they are played, where a turn after a tool
result is more uncertain than the episode's first, with the branch machinery of branch.py
(exact prefix copy, replay or fork of the env). `run_tree_episodes` (tree.py) comes here for
branch=entropy.

1. per task, rollout.tree.roots (N) root episodes start; every live leaf plays one turn per
   step (the leaves at one turn index in one `act` call, seeded turn + step x max_turns);
2. each sampled turn's entropy is recorded (`arpo_turn_entropy` of the generator's
   `Completion.entropies`: the first rollout.tree.entropy_tokens tokens, summed, over log |V|,
   |V| the tokenizer's vocabulary as in ARPO's code);
3. a node k (k turns played, turn k - 1 a tool call whose result was inserted; turns count
   from 0) is a branch point once the turn sampled from it, turn k, has been played:
   dH = H(turn k) - H(turn 0), the episode's first turn. The task's branch points of a step,
   in slot order, get up to beam_size - 1 new leaves each by ARPO's rule (`arpo_copies`),
   within the task's budget of rollout.group_size (M) leaves. A new leaf copies the prefix to
   node k and samples its own turn k onwards from the next step; its own branch points come
   after k;
4. a task none of whose leaves is live, short of M, gets one fresh root episode (a tree of its
   own) per step, as ARPO's code adds one fresh rollout per step to a sample with no active one.

The paper measures the entropy of the k tokens that follow a tool result and branches there;
ARPO's code branches after the tool result that follows the turn it measured (one node later).
This follows the paper: the turn sampled from node k is the probe, and node k is where the
branches start (the parent's turn k stays its own).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch

from agentic_rl.algos.tree import arpo_copies, arpo_turn_entropy
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.config.validate_tree import SEED_TURNS
from agentic_rl.envs.base import Env
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.branch import (
    Leaf,
    branch_leaf,
    node_tokens,
    play_leaves_turn,
    prompt_copy,
    tree_samples,
)
from agentic_rl.rollout.episode import Episode
from agentic_rl.rollout.loop import start_episodes
from agentic_rl.types import Completion, Task, Trajectory, TreePosition


def _entropy_actor(act: Actor, leaves: dict[int, Leaf], vocab_size: int, tokens: int) -> Actor:
    """`act`, recording on each episode's leaf the entropy of the turn it samples (ARPO's
    `arpo_turn_entropy` of the completion's first `tokens` token entropies)."""

    def observed(episodes: list[Episode], budgets: list[int], act_turn: int) -> list[Completion]:
        out = act(episodes, budgets, act_turn)
        for ep, completion in zip(episodes, out, strict=True):
            if completion.entropies is None:
                raise ValueError(
                    "rollout.tree.branch=entropy: the generator returned no token entropies "
                    "(Completion.entropies); it needs a generator that computes them when "
                    "SamplingParams.entropy_tokens > 0 (rollout.backend=hf)"
                )
            h = arpo_turn_entropy(torch.tensor(completion.entropies), vocab_size, tokens)
            leaves[id(ep)].entropy[len(ep.turn_spans)] = float(h)
        return out

    return observed


def branch_point(leaf: Leaf) -> int | None:
    """The node ARPO decides on after the leaf's latest turn k: node k when k >= 1 lies after
    the leaf's own branch point, turn k - 1 called a tool, and the entropies of turns 0 and k
    are known; else None."""
    k = len(leaf.episode.turn_spans) - 1
    if k < 1 or k <= leaf.position.shared_turns or leaf.actions[k - 1].kind != "tool":
        return None
    return k if k in leaf.entropy and 0 in leaf.entropy else None


class _EntropyForest:
    """The leaves of an entropy-branched rollout while it is played: each group's trees, the
    slot each leaf fills (in the order they start), the group's random stream."""

    def __init__(
        self,
        envs: Sequence[Env],
        tasks: Sequence[Task],
        group_ids: Sequence[str],
        slots: dict[str, list[int]],
        fmt: ChatFormat,
        tokenizer: Any,
        cfg: RolloutConfig,
        seed: int,
    ) -> None:
        self.envs, self.tasks, self.group_ids, self.slots = envs, tasks, group_ids, slots
        self.fmt, self.tokenizer, self.cfg, self.seed = fmt, tokenizer, cfg, seed
        self.leaf_of: dict[int, Leaf] = {}  # slot -> its leaf
        self.by_episode: dict[int, Leaf] = {}  # id(episode) -> its leaf
        self.trees: dict[str, list[list[Leaf]]] = {group: [] for group in slots}
        self.rngs = {group: random.Random(f"{seed}:{group}:arpo") for group in slots}

    def filled(self, group: str) -> int:
        return sum(len(t) for t in self.trees[group])

    def live(self, group: str | None = None) -> list[Leaf]:
        """The leaves whose episode goes on (of one group, or of all), in slot order."""
        groups = [group] if group is not None else list(self.slots)
        return [
            self.leaf_of[i]
            for g in groups
            for i in self.slots[g]
            if i in self.leaf_of and not self.leaf_of[i].episode.done
        ]

    def _place(self, group: str, leaf: Leaf, tree: list[Leaf]) -> None:
        slot = self.slots[group][self.filled(group)]
        tree.append(leaf)
        self.leaf_of[slot] = leaf
        self.by_episode[id(leaf.episode)] = leaf

    def start_roots(self, groups: Sequence[str]) -> None:
        """A fresh root episode, a tree of its own, in the next slot of each listed group (a
        group listed n times gets n)."""
        chosen = [
            self.slots[g][self.filled(g) + list(groups[:n]).count(g)] for n, g in enumerate(groups)
        ]
        started = start_episodes(
            [self.envs[i] for i in chosen],
            [self.tasks[i] for i in chosen],
            [self.group_ids[i] for i in chosen],
            self.tokenizer,
            self.seed,
            self.cfg.thinking_mode,
            self.fmt,
        )
        for group, ep in zip(groups, started, strict=True):
            position = TreePosition(tree_id=f"{group}#{len(self.trees[group])}", leaf=0)
            tree: list[Leaf] = []
            self.trees[group].append(tree)
            self._place(group, Leaf(ep, position, prompt_copy(ep)), tree)

    def branch(self, group: str, played: Sequence[Leaf]) -> None:
        """ARPO's decision for the group's branch points this step (`branch_point` of the leaves
        that played, in slot order): `arpo_copies` new leaves at each, within the group's
        budget, each a branch (`branch_leaf`) on its slot's env."""
        tree_cfg = self.cfg.tree
        points = [(leaf, k) for leaf in played if (k := branch_point(leaf)) is not None]
        budget = len(self.slots[group]) - self.filled(group)
        if not points or budget <= 0:
            return
        rng = self.rngs[group]
        delta = torch.tensor([leaf.entropy[k] - leaf.entropy[0] for leaf, k in points])
        uniform = torch.tensor(
            [[rng.random() for _ in range(tree_cfg.beam_size - 1)] for _ in points],
            dtype=torch.float64,
        )
        copies = arpo_copies(
            delta.double(), uniform, budget, tree_cfg.entropy_weight, tree_cfg.branch_threshold
        )
        for (parent, k), n in zip(points, copies.tolist(), strict=True):
            tree = next(
                t for t in self.trees[group] if t[0].position.tree_id == parent.position.tree_id
            )
            for _ in range(n):
                slot = self.slots[group][self.filled(group)]
                position = TreePosition(
                    tree_id=parent.position.tree_id,
                    leaf=len(tree),
                    parent=parent.position.leaf,
                    shared_turns=k,
                    shared_tokens=node_tokens(parent.episode, k),
                )
                leaf = branch_leaf(
                    parent,
                    k,
                    self.envs[slot],
                    position,
                    self.fmt,
                    self.tokenizer,
                    self.cfg,
                    self.seed,
                )
                self._place(group, leaf, tree)


def run_entropy_trees(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    group_ids: Sequence[str],
    slots: dict[str, list[int]],
    act: Actor,
    fmt: ChatFormat,
    tokenizer: Any,
    cfg: RolloutConfig,
    seed: int,
) -> list[list[Trajectory]]:
    """ARPO's entropy-triggered branching (module docstring, steps 1-4): every group's slots
    filled by its roots, then by branches and fresh roots in the order they start."""
    for group, members in slots.items():
        if len(members) <= cfg.tree.roots:
            raise ValueError(
                f"group {group} has {len(members)} episodes; rollout.tree.branch=entropy needs "
                f"more than rollout.tree.roots={cfg.tree.roots} (the budget branches fill)"
            )
    toolless = [type(env).__name__ for env in envs if not getattr(env, "tools", None)]
    if toolless:
        raise ValueError(
            f"rollout.tree.branch=entropy branches after tool calls, and {toolless[0]} has no "
            "tools: use rollout.tree.branch=random"
        )
    forest = _EntropyForest(envs, tasks, group_ids, slots, fmt, tokenizer, cfg, seed)
    observed = _entropy_actor(act, forest.by_episode, len(tokenizer), cfg.tree.entropy_tokens)
    forest.start_roots([group for group in slots for _ in range(cfg.tree.roots)])
    step = 0
    while live := forest.live():
        played: list[Leaf] = []
        for turn in sorted({len(leaf.episode.turn_spans) for leaf in live}):
            ready = [leaf for leaf in live if len(leaf.episode.turn_spans) == turn]
            act_turn = turn + step * cfg.max_turns
            if act_turn >= SEED_TURNS:  # entropy_tree_steps bounds it; validation keeps it below
                raise RuntimeError(f"tree rollout ran {step} steps, past its bound")
            played += play_leaves_turn(ready, observed, fmt, tokenizer, cfg, turn, act_turn)
        fresh = []
        for group, members in slots.items():
            ids = {id(leaf) for leaf in played}
            mine = [forest.leaf_of[i] for i in members if id(forest.leaf_of.get(i)) in ids]
            forest.branch(group, mine)
            if not forest.live(group) and forest.filled(group) < len(members):
                fresh.append(group)  # ARPO: one fresh rollout a step for a task with none live
        forest.start_roots(fresh)
        step += 1
    return tree_samples(forest.leaf_of, tokenizer)

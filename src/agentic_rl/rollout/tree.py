"""Tree-shaped rollouts (rollout.tree): Tree-GRPO's agent-step trees (rollout.tree.branch=random)
and ARPO's entropy-triggered branching (branch=entropy), played with the episode loop of loop.py.

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
one round are one prompt to it (the HF generator prefills identical prompts once). The HF
generator keeps the KV of each finished row across calls and reuses the longest prefix a prompt
shares with one, cut to that length (backends/kv_store.py), so a branch's prompt, its parent's
tokens up to the node, is prefilled in one token: the rest is its parent's KV, kept from the
parent's last turn while the tree is played (backends/base.py gives a tree rollout's store room
for its B x G episodes). bench/tree_rollout_work.py counts the prefill and decoded tokens;
bench/tree_rollouts.py logs decoded and reused prompt tokens per step.

ARPO (Dong et al. 2025, arXiv 2507.19849; rollout.tree.branch=entropy) grows the trees while
they are played, with the same branch machinery (exact prefix copy, replay or fork):

1. per task, rollout.tree.roots (N) root episodes start; every live leaf plays one turn per
   step (the leaves at one turn index in one `act` call, seeded turn + step x max_turns);
2. each sampled turn's entropy is recorded (`arpo_turn_entropy` of the generator's
   `Completion.entropies`: the first rollout.tree.entropy_tokens tokens, summed, over log |V|,
   |V| the tokenizer's vocabulary as in ARPO's code);
3. a node k (k turns played, turn k - 1 a tool call whose result was inserted; turns count
   from 0) is a branch point once the turn sampled from it, turn k, has been played:
   dH = H(turn k) - H(turn 0), the episode's first turn. The task's branch points of a step, in slot order, get up to beam_size - 1 new leaves
   each by ARPO's rule (`arpo_copies`), within the task's budget of rollout.group_size (M) leaves.
   A new leaf copies the prefix to node k and samples its own turn k onwards from the next step;
   its own branch points come after k;
4. a task none of whose leaves is live, short of M, gets one fresh root episode (a tree of its
   own) per step, as ARPO's code adds one fresh rollout per step to a sample with no active one.

The paper measures the entropy of the k tokens that follow a tool result and branches there;
ARPO's code branches after the tool result that follows the turn it measured (one node later).
This follows the paper: the turn sampled from node k is the probe, and node k is where the
branches start (the parent's turn k stays its own).
"""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentic_rl.algos.tree import arpo_copies, arpo_turn_entropy
from agentic_rl.config.rollout import RolloutConfig
from agentic_rl.config.validate_tree import SEED_TURNS
from agentic_rl.envs.base import Env, is_branchable
from agentic_rl.formats.chat import ChatFormat
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.episode import Episode, to_trajectory
from agentic_rl.rollout.loop import apply_step, end_episode, play_turn, start_episodes, step_envs
from agentic_rl.types import Action, Completion, StepResult, Task, Trajectory, TreePosition


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
    first = min((len(leaf.episode.turn_spans) for leaf in leaves), default=cfg.max_turns)
    for turn in range(first, cfg.max_turns):
        ready = [leaf for leaf in leaves if len(leaf.episode.turn_spans) <= turn]
        _play_turn(ready, act, fmt, tokenizer, cfg, turn, turn + round_index * cfg.max_turns)


def _play_turn(
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
    entropy = {t: h for t, h in parent.entropy.items() if t < k}
    return Leaf(ep, position, parent.start, actions=actions, results=results, entropy=entropy)


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
    """Play each group's slots as trees (see the module docstring); one sample per slot, in the
    order given. Its first rollout.tree.roots slots are the root episodes. branch=random: a
    group's slots (the same task) number exactly roots x (1 + iterations x expansions), the
    others filled by branches in order of round, tree and expansion, each on its slot's env.
    branch=entropy: a group has more slots than roots (its budget M), filled by branches and
    fresh roots in the order they start."""
    tree = cfg.tree
    slots: dict[str, list[int]] = {}
    for i, group in enumerate(group_ids):
        slots.setdefault(group, []).append(i)
    for env in envs:
        if not is_branchable(env):
            raise ValueError(f"{type(env).__name__} declares branchable = False: no tree rollout")
    if tree.branch == "entropy":
        return _run_entropy_trees(envs, tasks, group_ids, slots, act, fmt, tokenizer, cfg, seed)
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
    return _samples(leaf_of, tokenizer)


def _samples(leaf_of: dict[int, Leaf], tokenizer: Any) -> list[list[Trajectory]]:
    """Every slot's leaf, closed, as its one training sample with its tree position."""
    out = []
    for i in range(len(leaf_of)):
        leaf = leaf_of[i]
        end_episode(leaf.episode)
        trajectory = to_trajectory(leaf.episode, tokenizer)
        trajectory.tree = leaf.position
        out.append([trajectory])
    return out


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
            self._place(group, Leaf(ep, position, _prompt_copy(ep)), tree)

    def branch(self, group: str, played: Sequence[Leaf]) -> None:
        """ARPO's decision for the group's branch points this step (`branch_point` of the leaves
        that played, in slot order): `arpo_copies` new leaves at each, within the group's
        budget, each a branch (`_branch`) on its slot's env."""
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
                    shared_tokens=_node_tokens(parent.episode, k),
                )
                leaf = _branch(
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


def _run_entropy_trees(
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
            played += _play_turn(ready, observed, fmt, tokenizer, cfg, turn, act_turn)
        fresh = []
        for group, members in slots.items():
            ids = {id(leaf) for leaf in played}
            mine = [forest.leaf_of[i] for i in members if id(forest.leaf_of.get(i)) in ids]
            forest.branch(group, mine)
            if not forest.live(group) and forest.filled(group) < len(members):
                fresh.append(group)  # ARPO: one fresh rollout a step for a task with none live
        forest.start_roots(fresh)
        step += 1
    return _samples(forest.leaf_of, tokenizer)


def decoded_tokens(trajectory: Trajectory) -> int:
    """The tokens the generator sampled for this sample itself: its loss-mask-1 tokens after
    the prefix it copied from its parent (all of them outside a tree)."""
    shared = trajectory.tree.shared_tokens if trajectory.tree is not None else 0
    return sum(trajectory.loss_mask[shared:])


def distinct_trajectories(samples: Sequence[Trajectory]) -> int:
    """How many of the samples differ in their token ids (two leaves that sampled the same
    continuation are one trajectory)."""
    return len({tuple(s.token_ids) for s in samples})

"""Episodes and trajectories -> padded tensors: the `TrainBatch` the learner trains on.

`Episodes` holds a step's rollout episodes (groups of samples) and their tasks. `collate` right-pads token-aligned trajectories into one batch (position t holds token t, its loss
mask, its behaviour logprob log pi_old(x_t | x_<t) and the step reward earned by the turn whose
last loss-mask-1 token is t); `collate_episodes` collates episodes of one or more samples each,
with the GiGPO step returns and anchor-state groups when asked. `update.py` computes the advantages and runs the
update on these batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentic_rl.algos.gigpo import anchor_groups, discounted_step_returns
from agentic_rl.config.algo import GigpoConfig
from agentic_rl.types import ImageRef, Task, Trajectory


@dataclass
class Episodes:
    """Rollout episodes and the task of each (same order)."""

    samples: list[list[Trajectory]] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)

    def extend(self, other: Episodes) -> None:
        self.samples += other.samples
        self.tasks += other.tasks

    def select(self, keep: list[int]) -> Episodes:
        return Episodes([self.samples[i] for i in keep], [self.tasks[i] for i in keep])

    def rewards(self) -> torch.Tensor:
        """[E] episode rewards."""
        return torch.tensor([s[0].reward for s in self.samples], dtype=torch.float32)

    def group_ids(self) -> torch.Tensor:
        """[E] dense group index per episode, in order of first appearance."""
        index: dict[str, int] = {}
        return torch.tensor(
            [index.setdefault(s[0].group_id, len(index)) for s in self.samples], dtype=torch.long
        )

    def groups(self) -> list[list[int]]:
        """Episode indices per group, groups in order of first appearance."""
        out: dict[str, list[int]] = {}
        for i, s in enumerate(self.samples):
            out.setdefault(s[0].group_id, []).append(i)
        return list(out.values())

    def first_groups(self, n: int) -> Episodes:
        """The episodes of the first `n` groups."""
        return self.select(sorted(i for g in self.groups()[:n] for i in g))


@dataclass
class TrainBatch:
    """Right-padded tensors for N trajectories of up to T tokens."""

    input_ids: torch.Tensor  # [N, T] long
    attention_mask: torch.Tensor  # [N, T] long
    loss_mask: torch.Tensor  # [N, T] float, 1 on policy tokens
    old_logprobs: torch.Tensor  # [N, T] pi_old: behaviour logprobs until the learner recomputes
    # them (algo.recompute_old_logprobs); 0 off the mask
    rewards: torch.Tensor  # [N] episode rewards
    token_rewards: torch.Tensor  # [N, T] step rewards on their turn's last mask-1 token
    group_ids: torch.Tensor  # [N] long
    episode_index: torch.Tensor | None = None  # [N] long: the episode of each row (step mode)
    step_returns: torch.Tensor | None = None  # [N] discounted return from each step (gigpo)
    step_group_ids: torch.Tensor | None = None  # [N] long anchor-state groups (gigpo)
    task_type_ids: torch.Tensor | None = None  # [N] long (trr_pp)
    role_ids: torch.Tensor | None = None  # [N] long (trr_pp)
    turn_ids: torch.Tensor | None = None  # [N, T] long: the model turn of each token (its index
    # in the row's turn_spans), -1 off turns (prompt, observations, padding)
    turn_rewards: torch.Tensor | None = None  # [N, K] each turn's step reward (0-padded; the
    # row's reward beyond its step rewards is on its last turn, as on token_rewards)
    num_turns: torch.Tensor | None = None  # [N] long: the turns of each row (K = the most)
    episode_turns: bool = False  # the turn tensors describe each row's whole episode, turn ids
    # counted over the episode (a turn-level estimator: episode_turn_tensors)
    value_mask: torch.Tensor | None = None  # [N, T] where the critic is trained (turn_ppo: each
    # turn's first trained token); None = every loss-mask token
    tree_ids: torch.Tensor | None = None  # [N] long: the tree of each leaf (rollout.tree)
    agent_ids: torch.Tensor | None = None  # [N] long: the agent role of each row, an index
    # into agent_names (multi-agent envs: algo.role_groups, model.role_policies); None = no roles
    agent_names: tuple[str, ...] = ()  # the roles agent_ids index, sorted
    advantages: torch.Tensor | None = None  # [N, T]
    returns: torch.Tensor | None = None  # [N, T] (ppo)
    old_values: torch.Tensor | None = None  # [N, T] (ppo)
    ref_logprobs: torch.Tensor | None = None  # [N, T] (kl_coef > 0)
    behav_logprobs: torch.Tensor | None = None  # [N, T] the generator's logprobs, kept: the
    # rollout correction and the mismatch metrics compare pi_old with them (0 off the mask)
    old_recomputed: bool = False  # old_logprobs hold the learner's pi_old (recomputed), not
    # the behaviour logprobs: learner/update.py recompute_old_logprobs, once per batch
    stale: bool = False  # samples may be from older weights (async rollouts, serve-policy):
    # the learner corrects them with decoupled PPO (scale/async_rollout.correct_stale)
    images: list[list[ImageRef]] | None = None  # [N] each row's images, in placeholder order
    # (vision-language policies, model/vision.py); None when no row has any

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, idx: slice | torch.Tensor) -> TrainBatch:
        fields = {k: (v[idx] if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()}
        if self.images is not None:  # a list per row: picked like the tensors' rows
            if isinstance(idx, slice):
                rows = list(range(len(self))[idx])
            else:  # index or boolean-mask tensor
                rows = (idx.nonzero().flatten() if idx.dtype == torch.bool else idx).tolist()
            fields["images"] = [self.images[i] for i in rows]
        return TrainBatch(**fields)

    def to(self, device: torch.device | str) -> TrainBatch:
        """The batch with every tensor on `device` (trainer.device). A step's batch and its
        advantage math stay on the CPU; each micro-batch moves to the learner's device for its
        forward (and backward) pass, and what a no-grad pass computes comes back."""
        fields = {
            k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in vars(self).items()
        }
        return TrainBatch(**fields)


def tree_order(batch: TrainBatch, rows: torch.Tensor) -> torch.Tensor:
    """`rows` reordered (stably) so that the leaves of each tree rollout (`tree_ids`) are
    consecutive, trees in the order of their first row: a micro-batch cut from them then holds
    whole trees, whose shared turns the packed forward computes once (model/packing.py).
    Unchanged without trees. rows [R] -> [R]."""
    if batch.tree_ids is None:
        return rows
    trees = batch.tree_ids[rows]
    first = {t: k for k, t in reversed(list(enumerate(trees.tolist())))}
    rank = torch.tensor([first[t] for t in trees.tolist()], dtype=torch.long)
    return rows[torch.argsort(rank, stable=True)]


@dataclass(frozen=True)
class RowTokens:
    """What a micro-batch of consecutive rows costs in tokens (optim.micro_batch_tokens).

    `lengths[i]`: row i's tokens; `shared[i]`: the leading tokens row i shares with row i - 1.
    `packed`: the learner pass runs a micro-batch as one packed row (model.share_prefix), a
    prefix shared with the row before once (a group's prompt, a tree's common turns:
    model/packing.py); otherwise every row padded to the micro-batch's longest."""

    lengths: Sequence[int]
    shared: Sequence[int]
    packed: bool

    def cost(self, start: int, end: int) -> int:
        """Tokens of the micro-batch [start, end): e.g. lengths [10, 12, 9], shared [0, 8, 8],
        packed: 10 + (12 - 8) + (9 - 8) = 15 for [0, 3), 12 + 1 = 13 for [1, 3); padded:
        3 x 12 = 36."""
        if end <= start:
            return 0
        if not self.packed:
            return (end - start) * max(self.lengths[start:end])
        rest = sum(self.lengths[i] - self.shared[i] for i in range(start + 1, end))
        return self.lengths[start] + rest


def row_tokens(input_ids: torch.Tensor, attention_mask: torch.Tensor, packed: bool) -> RowTokens:
    """`RowTokens` of right-padded rows [R, T] in their order: each row's length and the
    leading tokens it has in common with the row before it."""
    lengths = attention_mask.sum(dim=1)
    shared = torch.zeros_like(lengths)
    if len(lengths) > 1:
        alike = (input_ids[1:] == input_ids[:-1]) & (attention_mask[1:] > 0)
        alike &= attention_mask[:-1] > 0
        shared[1:] = alike.long().cumprod(dim=1).sum(dim=1)
    return RowTokens(lengths.tolist(), shared.tolist(), packed)


def micro_batch_bounds(
    count: int,
    size: int,
    trees: Sequence[int] | None = None,
    tokens: RowTokens | None = None,
    max_tokens: int = 0,
) -> list[tuple[int, int]]:
    """[start, end) of each micro-batch of `count` rows: at most `size` rows each and, with
    `max_tokens` > 0, at most `max_tokens` tokens as the pass runs them (`tokens`: RowTokens;
    a row over the budget on its own is a micro-batch of one). Given each row's tree
    (`trees`, a tree's rows consecutive: `tree_order`), whole trees, as many as fit, and a tree
    that fits in no micro-batch cut where the limits fall. A tree split over two micro-batches
    would have its shared turns forwarded in both (model/packing.py); the micro-batches may be
    more, and smaller, and no more tokens pass the linear layers. Micro-batch losses are
    normalised by their mini-batch's counts, so the gradient does not depend on the cut.

    E.g. trees [0, 0, 0, 1, 1, 1, 2, 2], size 4: [(0, 3), (3, 6), (6, 8)] (every 4 rows:
    [(0, 4), (4, 8)]); trees [0, 0, 0, 0, 0, 1], size 4: [(0, 4), (4, 6)]; lengths
    [5, 5, 5, 9], nothing shared, packed, size 8, max_tokens 10: [(0, 2), (2, 3), (3, 4)]."""
    if size < 1:
        raise ValueError(f"micro-batch size {size} < 1")
    if max_tokens > 0 and tokens is None:
        raise ValueError("a token budget needs the rows' tokens (RowTokens)")

    def fits(start: int, end: int) -> bool:
        if end - start > size:
            return False
        return max_tokens <= 0 or tokens is None or tokens.cost(start, end) <= max_tokens

    bounds: list[tuple[int, int]] = []
    start = first = 0  # the open micro-batch's first row, the unit's (tree's or row's) first
    while first < count:
        end = first + 1
        while trees is not None and end < count and trees[end] == trees[first]:
            end += 1
        if first > start and not fits(start, end):  # the unit does not fit beside the others
            bounds.append((start, first))
            start = first
        while not fits(start, end):  # nor in a micro-batch of its own: cut where limits fall
            cut = start + 1
            while cut < end and fits(start, cut + 1):
                cut += 1
            bounds.append((start, cut))
            start = cut
        first = end
    if start < count:
        bounds.append((start, count))
    return bounds


def reward_positions(
    turn_spans: Sequence[tuple[int, int]], loss_mask: Sequence[int]
) -> list[int | None]:
    """The token each turn's step reward is placed on: the turn's last loss-mask-1 token.

    A reward on a mask-0 token is multiplied away (`collate` masks the token rewards) and PPO's
    GAE never sees it; a turn can end in inserted tokens (the thinking budget's stop phrase,
    `Completion.inserted`), so its last token is not the place. A turn without any mask-1 token
    (all inserted) gives its reward to the last mask-1 token before it (the action that led
    there); None when the row has none (nothing of it trains).

    turn_spans [K] of [start, end) token ranges, loss_mask [T] -> [K] token indices or None.
    E.g. spans [(2, 5), (6, 8)], mask [0, 0, 1, 1, 0, 0, 0, 0] -> [3, 3]."""
    out: list[int | None] = []
    for _, end in turn_spans:
        position = next((i for i in range(end - 1, -1, -1) if loss_mask[i]), None)
        out.append(position)
    return out


def turn_tensors(
    trajectories: Sequence[Trajectory], width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The turn structure of each row, for turn-level credit (algos/turns.py): each token's
    turn, each turn's reward and the number of turns.

    Turn k of a row is its k-th `turn_spans` range (every token of it, inserted ones included:
    the estimators mask by the loss mask); its reward is `step_rewards[k]`. The row's reward
    beyond the sum of those (reward functions applied after the rollout) is added to its last
    turn, as `collate` adds it to the last turn's token reward.

    -> turn_ids [N, width] long (-1 off turns), turn_rewards [N, K] float, num_turns [N] long,
    K = max(1, the most turns of a row). E.g. spans [(2, 4), (5, 7)], step rewards [0.5, 1],
    reward 2 -> ids [-1, -1, 0, 0, -1, 1, 1], rewards [0.5, 1.5], 2 turns: each row is an
    episode of one sample (`episode_turn_tensors`)."""
    return episode_turn_tensors([[t] for t in trajectories], width)


def collate(trajectories: list[Trajectory], pad_token_id: int) -> TrainBatch:
    n, width = len(trajectories), max(len(t.token_ids) for t in trajectories)
    ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width))
    old = torch.zeros((n, width))
    token_rewards = torch.zeros((n, width))
    groups: dict[str, int] = {}
    trees: dict[str, int] = {}
    tree_of: list[int] = []
    for i, t in enumerate(trajectories):
        length = len(t.token_ids)
        ids[i, :length] = torch.tensor(t.token_ids)
        attn[i, :length] = 1
        mask[i, :length] = torch.tensor(t.loss_mask, dtype=torch.float32)
        old[i, :length] = torch.tensor(t.logprobs, dtype=torch.float32)
        # Step rewards land on the last token of the turn that earned them that trains; the
        # episode reward not attributed to this row's turns (the other samples' steps of a
        # multi-sample episode) lands on the row's last one.
        ends = reward_positions(t.turn_spans, t.loss_mask)
        for end, r in zip(ends, t.step_rewards, strict=False):
            if end is not None:
                token_rewards[i, end] += r
        leftover = t.reward - sum(t.step_rewards[: len(t.turn_spans)])
        if abs(leftover) > 0 and ends and ends[-1] is not None:
            token_rewards[i, ends[-1]] += leftover
        groups.setdefault(t.group_id, len(groups))
        # A row outside any tree is a tree of its own (Tree-GRPO's intra term is 0 for it).
        key = t.tree.tree_id if t.tree is not None else f"\0row{i}"
        tree_of.append(trees.setdefault(key, len(trees)))
    turn_ids, turn_rewards, num_turns = turn_tensors(trajectories, width)
    roles = {t.role for t in trajectories}
    agents = tuple(sorted(roles)) if roles != {""} else ()
    return TrainBatch(
        input_ids=ids,
        attention_mask=attn,
        loss_mask=mask,
        old_logprobs=old * mask,
        behav_logprobs=old * mask,
        rewards=torch.tensor([t.reward for t in trajectories], dtype=torch.float32),
        token_rewards=token_rewards * mask,
        group_ids=torch.tensor([groups[t.group_id] for t in trajectories], dtype=torch.long),
        episode_index=torch.arange(n),
        turn_ids=turn_ids,
        turn_rewards=turn_rewards,
        num_turns=num_turns,
        tree_ids=torch.tensor(tree_of, dtype=torch.long)
        if any(t.tree is not None for t in trajectories)
        else None,
        images=[list(t.images) for t in trajectories]
        if any(t.images for t in trajectories)
        else None,
        agent_ids=torch.tensor([agents.index(t.role) for t in trajectories], dtype=torch.long)
        if agents
        else None,
        agent_names=agents,
    )


def unmask_observations(trajectory: Trajectory) -> Trajectory:
    """A copy whose loss mask covers every token after the prompt, observations included.

    Search-R1 (Jin et al. 2025, Sec. 3.1) masks retrieved tokens out of the policy loss; this is
    its ablation. Observation tokens were not sampled, so their behaviour logprobs are unknown
    (0 here): only valid with one on-policy epoch, where pi_old is the current policy (the
    config enforces algo.epochs=1 and no KL-in-reward)."""
    start = trajectory.prompt_length
    mask = [0] * start + [1] * (len(trajectory.token_ids) - start)
    return dataclasses.replace(trajectory, loss_mask=mask)


def episode_turn_tensors(
    episodes: list[list[Trajectory]], width: int, by_role: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`turn_tensors` for episodes whose turns are spread over several rows (step mode: one
    turn a row; memory mode: one conversation a row; context-budget segments: a few turns a
    row): the turn structure of the whole episode, on each of its rows.

    The episode's turns are its samples' `turn_spans` in order; the j-th of them, wherever it
    sits, gets turn id j on its tokens (its index in the episode, not in the row). Every row of
    the episode holds the episode's turn rewards [r_0, ..., r_{K-1}] (each sample's
    `step_rewards`, one per span; the episode's reward beyond their sum on the last turn, as
    `turn_tensors` does) and its turn count K. The turn-level estimators then read each
    episode once (its first row) and each row's turns by their ids (algos/estimators.py). With
    one sample an episode this is `turn_tensors`. E.g. step rows with rewards 0.5 and 1 and an
    episode reward of 2: ids [.., 0, 0] and [.., 1], rewards [0.5, 1.5] on both, 2 turns each.

    With `by_role` (a multi-agent episode, whose samples carry their `role`), each role's
    samples of an episode are a unit of their own, in their order: the role's turns are
    numbered 0, 1, ... and its table holds its own step rewards, its last turn taking the
    role's reward beyond them (the team's outcome plus the role's own terms,
    rollout/roles.py), so turn k is always the same role's k-th turn (algos/roles.py
    `role_units`).
    -> turn_ids [N, width] long (-1 off turns), turn_rewards [N, K], num_turns [N]."""
    rows = [s for samples in episodes for s in samples]
    units: list[list[int]] = []
    start = 0
    for samples in episodes:
        members: dict[str, list[int]] = {}
        for offset, sample in enumerate(samples):
            members.setdefault(sample.role if by_role else "", []).append(start + offset)
        units.extend(members.values())
        start += len(samples)
    counts = [sum(len(rows[i].turn_spans) for i in unit) for unit in units]
    most = max([1, *counts])
    turn_ids = torch.full((len(rows), width), -1, dtype=torch.long)
    turn_rewards = torch.zeros((len(rows), most))
    num_turns = torch.zeros(len(rows), dtype=torch.long)
    for unit, count in zip(units, counts, strict=True):
        table = torch.zeros(most)
        turn = 0
        for i in unit:
            sample = rows[i]
            for k, (begin, end) in enumerate(sample.turn_spans):
                turn_ids[i, begin:end] = turn
                table[turn] = sample.step_rewards[k] if k < len(sample.step_rewards) else 0.0
                turn += 1
        if count:
            table[count - 1] += rows[unit[-1]].reward - float(table.sum())
        turn_rewards[unit] = table
        num_turns[unit] = count
    return turn_ids, turn_rewards, num_turns


def collate_episodes(
    episodes: list[list[Trajectory]],
    pad_token_id: int,
    gigpo: GigpoConfig | None = None,
    episode_turns: bool = False,
) -> TrainBatch:
    """Collate episodes given as lists of samples (one per episode in episode mode, one per
    step in step mode); rows keep their episode index. With `gigpo`, also the discounted step
    returns R_t = sum_k gamma^(k-t) r_k and the anchor-state step groups of every row (a step
    without an anchor is its own singleton group, so it gets no step advantage). With
    `episode_turns` (a turn-level estimator), each row's turn tensors describe its whole
    episode (`episode_turn_tensors`), or in a multi-agent episode its role's turns in it."""
    flat = [sample for samples in episodes for sample in samples]
    batch = collate(flat, pad_token_id)
    batch.episode_index = torch.tensor(
        [e for e, samples in enumerate(episodes) for _ in samples], dtype=torch.long
    )
    if episode_turns:
        width = batch.input_ids.shape[1]
        by_role = batch.agent_ids is not None
        batch.turn_ids, batch.turn_rewards, batch.num_turns = episode_turn_tensors(
            episodes, width, by_role
        )
        batch.episode_turns = True
    if gigpo is not None:
        rewards = [[sum(s.step_rewards) for s in samples] for samples in episodes]
        returns = discounted_step_returns(rewards, gamma=gigpo.gamma)
        batch.step_returns = torch.tensor([r for ep in returns for r in ep], dtype=torch.float32)
        anchors = [
            s.anchors[0] if s.anchors else ("__no_anchor__", e, t)
            for e, samples in enumerate(episodes)
            for t, s in enumerate(samples)
        ]
        threshold = gigpo.similarity_threshold if gigpo.similarity_threshold < 1 else None
        groups = anchor_groups(anchors, [s.group_id for s in flat], threshold)
        batch.step_group_ids = torch.tensor(groups, dtype=torch.long)
    return batch


def role_parts(batch: TrainBatch, rows: torch.Tensor, by_role: bool) -> list[torch.Tensor]:
    """`rows` split by agent role (their order kept within each role), so every micro-batch
    cut from one part runs through one role's policy (model.role_policies); `[rows]` when not
    `by_role` or the batch has no roles."""
    if not by_role or batch.agent_ids is None:
        return [rows]
    ids = batch.agent_ids[rows]
    return [rows[ids == k] for k in dict.fromkeys(ids.tolist())]


def micro_batch_role(mb: TrainBatch, roles: tuple[str, ...]) -> str | None:
    """The role whose policy scores micro-batch `mb` (all its rows are that role's: cut from
    one `role_parts` part); None without role policies (`roles`, model/roles.py)."""
    if not roles:
        return None
    if mb.agent_ids is None:
        raise ValueError(f"the policy has role policies ({', '.join(roles)}) but no row a role")
    names = {mb.agent_names[k] for k in mb.agent_ids.tolist()}
    if len(names) != 1 or not names <= set(roles):
        raise ValueError(f"a micro-batch of roles {sorted(names)} for role policies {roles}")
    return names.pop()

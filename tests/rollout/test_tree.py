"""Tree rollouts (rollout/tree.py, rollout/branch.py): the trees' shape, prefixes shared token
for token, replay and fork of the env, the generator's work (counted), and Tree-GRPO's
advantages by hand through the learner's collate + compute_advantages."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.algo import AlgoConfig
from agentic_rl.config.rollout import RolloutConfig, TreeConfig
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate_episodes
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.branch import ReplayDivergedError
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.rollout.tree import (
    decoded_tokens,
    distinct_trajectories,
    run_tree_episodes,
    train_leaf_indices,
)
from agentic_rl.types import Completion, Observation, Trajectory, TreePosition

MAX_TURNS = 4


def tree_cfg(roots: int = 2, expansions: int = 2, iterations: int = 1, **kw: Any) -> RolloutConfig:
    tree = TreeConfig(roots=roots, expansions=expansions, iterations=iterations)
    base = dict(max_turns=MAX_TURNS, max_tokens_per_turn=64, max_total_tokens=512, tree=tree)
    return RolloutConfig(**{**base, **kw})


class ScriptedActor:
    """Two calculator calls then an answer; the call's operands name the round (act_turn //
    max_turns) and the turn, so a branch's own turns differ from its parent's. Round 0 answers
    the gold answer (reward 1), later rounds a wrong one (reward 0). Records every prompt."""

    def __init__(self, tokenizer: Any, gold: dict[str, str]) -> None:
        self.tokenizer = tokenizer
        self.gold = gold
        self.prompts: list[tuple[str, int, list[int]]] = []

    def __call__(self, episodes: list, budgets: list[int], act_turn: int) -> list[Completion]:
        rnd, turn = divmod(act_turn, MAX_TURNS)
        out = []
        for ep in episodes:
            self.prompts.append((ep.group_id, act_turn, list(ep.token_ids)))
            if turn < 2:
                text = f"<calc>{rnd}+{turn}</calc>"
            else:
                text = f"<answer>{self.gold[ep.task.task_id] if rnd == 0 else 'x'}</answer>"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            out.append(Completion(ids, [-0.25 - 0.01 * i for i in range(len(ids))], "stop", text))
        return out


def play_trees(tokenizer: Any, env_type: type = CalculatorEnv, **tree: int):
    tasks = make_calculator_tasks("eval", 2, seed=0)
    cfg = tree_cfg(**tree)
    g = cfg.tree.roots * (1 + cfg.tree.iterations * cfg.tree.expansions)
    expanded = [t for t in tasks for _ in range(g)]
    groups = [f"1:{t.task_id}" for t in expanded]
    envs = [env_type() for _ in expanded]
    act = ScriptedActor(tokenizer, {t.task_id: t.answers[0] for t in tasks})
    fmt = TagFormat(envs[0].tools)
    samples = run_tree_episodes(envs, expanded, groups, act, fmt, tokenizer, cfg, seed=3)
    return [s for ep in samples for s in ep], act, envs


def test_tree_shape_and_prefixes_shared_token_for_token(tokenizer):
    leaves, act, _ = play_trees(tokenizer)
    assert len(leaves) == 12  # 2 tasks x 2 trees x (1 + 1 x 2) leaves
    by_tree: dict[str, list] = {}
    for leaf in leaves:
        by_tree.setdefault(leaf.tree.tree_id, []).append(leaf)
    assert len(by_tree) == 4 and all(len(v) == 3 for v in by_tree.values())
    for tree in by_tree.values():
        root = tree[0]
        assert (root.tree.leaf, root.tree.parent, root.tree.shared_turns) == (0, -1, 0)
        assert len(root.turn_spans) == 3 and root.reward == 1.0  # calc, calc, answer
        # the root's two inner nodes (after turn 1 and turn 2), each expanded once
        assert sorted(b.tree.shared_turns for b in tree[1:]) == [1, 2]
        assert sorted(b.tree.leaf for b in tree[1:]) == [1, 2]
        for branch in tree[1:]:
            pos = branch.tree
            assert pos.parent == 0 and pos.shared_tokens == root.turn_spans[pos.shared_turns][0]
            n = pos.shared_tokens
            assert branch.token_ids[:n] == root.token_ids[:n]
            assert branch.loss_mask[:n] == root.loss_mask[:n]
            assert branch.logprobs[:n] == root.logprobs[:n]
            assert branch.token_versions[:n] == root.token_versions[:n]
            assert branch.turn_spans[: pos.shared_turns] == root.turn_spans[: pos.shared_turns]
            assert branch.token_ids[n:] != root.token_ids[n:]  # its own turns
            assert branch.reward == 0.0 and branch.terminated
            assert branch.step_rewards[: pos.shared_turns] == root.step_rewards[: pos.shared_turns]
            # the generator was asked to continue exactly the shared prefix
            assert (branch.group_id, MAX_TURNS + pos.shared_turns, branch.token_ids[:n]) in [
                (g, t, p) for g, t, p in act.prompts
            ]
    # decoded tokens: a branch's copied prefix is not counted again
    for leaf in leaves:
        own = sum(leaf.loss_mask[leaf.tree.shared_tokens :]) if leaf.tree.parent >= 0 else None
        assert decoded_tokens(leaf) == (own if own is not None else sum(leaf.loss_mask))
    # the scripted actor plays a task's two trees alike: 3 distinct leaves per task
    assert distinct_trajectories(leaves) == 6


def test_a_second_round_can_branch_from_branches(tokenizer):
    leaves, _, _ = play_trees(tokenizer, roots=1, expansions=1, iterations=3)
    tree = [x for x in leaves if x.tree.tree_id == leaves[0].tree.tree_id]
    assert [x.tree.leaf for x in tree] == [0, 1, 2, 3]
    for leaf in tree[1:]:  # every node is expanded once at most while there are unexpanded ones
        parent = tree[leaf.tree.parent]
        n = leaf.tree.shared_tokens
        assert leaf.token_ids[:n] == parent.token_ids[:n] and leaf.tree.parent < leaf.tree.leaf


def test_fork_path_gives_the_same_leaves_without_replay(tokenizer, forking_calculator):
    replayed, _, _ = play_trees(tokenizer)
    forked, _, _ = play_trees(tokenizer, env_type=forking_calculator)
    assert forking_calculator.resets == 4  # the roots only: branches start from copies
    for a, b in zip(replayed, forked, strict=True):
        assert (a.token_ids, a.loss_mask, a.logprobs, a.tree) == (
            b.token_ids,
            b.loss_mask,
            b.logprobs,
            b.tree,
        )
        assert (a.reward, a.step_rewards, a.metrics) == (b.reward, b.step_rewards, b.metrics)


class DriftingCalculator(CalculatorEnv):
    """Its tool results count the resets of every instance (state outside the episode):
    replay cannot reproduce them."""

    resets = 0

    def reset(self, task, seed):
        type(self).resets += 1
        self.mine = type(self).resets
        return super().reset(task, seed)

    def step(self, action):
        result = super().step(action)
        if result.observation is not None:
            result.observation = Observation(content=f"{self.mine}", name="calc")
        return result


def test_replay_that_diverges_stops_the_rollout(tokenizer):
    with pytest.raises(ReplayDivergedError, match="DriftingCalculator.*branchable = False"):
        play_trees(tokenizer, env_type=DriftingCalculator)


def test_unbranchable_env_is_refused(tokenizer, monkeypatch):
    monkeypatch.setattr(CalculatorEnv, "branchable", False, raising=False)
    with pytest.raises(ValueError, match="branchable = False"):
        play_trees(tokenizer)


def test_tree_grpo_advantages_by_hand_through_the_learner(tokenizer):
    leaves, _, _ = play_trees(tokenizer)
    batch = collate_episodes([[x] for x in leaves], tokenizer.pad_token_id)
    assert batch.tree_ids is not None
    # a group's slots: its two roots, then tree 0's two branches, then tree 1's
    assert batch.tree_ids.tolist() == [0, 1, 0, 0, 1, 1, 2, 3, 2, 2, 3, 3]
    compute_advantages(batch, AlgoConfig(name="tree_grpo"))
    # Every tree is [1, 0, 0]; every task's group [1, 0, 0, 1, 0, 0].
    # A_inter: mean 1/3, unbiased std sqrt(4/15); A_intra: mean 1/3, std sqrt(1/3).
    inter = (2 / 3 / math.sqrt(4 / 15), -1 / 3 / math.sqrt(4 / 15))
    intra = (2 / 3 / math.sqrt(1 / 3), -1 / 3 / math.sqrt(1 / 3))
    expected = [inter[0] + intra[0] if x.reward == 1 else inter[1] + intra[1] for x in leaves]
    assert expected[:3] == pytest.approx([2.4457, 2.4457, -1.2228], abs=1e-4)
    assert batch.advantages is not None
    for row, value in enumerate(expected):
        trained = batch.loss_mask[row] > 0
        assert batch.advantages[row][trained] == pytest.approx(
            torch.full((int(trained.sum()),), value), abs=1e-4
        )
        assert (batch.advantages[row][~trained] == 0).all()
    # plain GRPO on the same leaves is the inter term alone
    compute_advantages(batch, AlgoConfig(name="grpo"))
    first = batch.advantages[2][batch.loss_mask[2] > 0][0]
    assert float(first) == pytest.approx(inter[1], abs=1e-4)


def test_tree_grpo_flags():
    x = ADVANTAGE_ESTIMATORS["tree_grpo"]
    assert x.tree_groups and x.needs_groups and not x.per_episode


def prefill_of(leaves: list, branch_start: Callable[[int], int]) -> int:
    """Prompt tokens the HF generator prefills for these leaves: each distinct task prompt
    whole (the roots' first call); each later turn its last sampled token and the observation
    (the KV of the rest is the episode's own row's, kept); each distinct branch prompt (a
    round's first call for it) `branch_start(its length)`."""
    roots: set[tuple[int, ...]] = set()
    branches: set[tuple[int, ...]] = set()
    total = 0
    for leaf in leaves:
        spans, first = leaf.turn_spans, leaf.tree.shared_turns
        start = leaf.token_ids[: spans[first][0]]
        (branches if leaf.tree.parent >= 0 else roots).add(tuple(start))
        total += sum(spans[t][0] - (spans[t - 1][1] - 1) for t in range(first + 1, len(spans)))
    return total + sum(map(len, roots)) + sum(branch_start(len(p)) for p in branches)


def test_hf_generator_work_of_a_tree_round(tiny, tokenizer):
    """The real loop on the tiny model (it never writes a tag: every turn is an invalid action,
    an error observation and another turn, so every root has inner nodes). Counted: tokens
    decoded, prompt tokens prefilled and reused, against independent episodes; the tree's
    branches reuse their parents' KV (the generator's store keeps room for the rollout's
    episodes, `kv_rows`), and sample what a generator without any kept KV samples."""
    tasks = make_calculator_tasks("train", 2, seed=0)
    cfg = tree_cfg(max_turns=3, max_tokens_per_turn=5, max_total_tokens=400)
    g = 6
    expanded = [t for t in tasks for _ in range(g)]
    groups = [f"0:{t.task_id}" for t in expanded]
    fmt = TagFormat(CalculatorEnv().tools)
    work = {}
    for mode in ("tree", "independent", "tree without kept KV"):
        cache = mode != "tree without kept KV"
        trees = mode != "independent"  # as make_generator gives each
        gen = HFGenerator(
            tiny,
            tokenizer,
            max_batch_size=64,
            prefix_cache=cache,
            kv_rows=2 * g if trees else 0,
            cut_prefixes=trees,
        )
        act = policy_actor(gen, fmt, cfg, seed=1)
        envs = [CalculatorEnv() for _ in expanded]
        if mode != "independent":
            samples = run_tree_episodes(envs, expanded, groups, act, fmt, tokenizer, cfg, 0)
            leaves = [s for ep in samples for s in ep]
        else:
            leaves = run_episodes(envs, expanded, groups, act, fmt, tokenizer, cfg, 0)
        work[mode] = (sum(decoded_tokens(x) for x in leaves), gen.prompt_tokens, leaves)
    tree_decoded, tree_prefill, leaves = work["tree"]
    flat_decoded, flat_prefill, flat = work["independent"]
    assert all(len(x.turn_spans) == 3 for x in flat)  # 3 turns x 5 tokens each
    assert flat_decoded == 12 * 3 * 5
    # roots decode 3 turns, a branch after k shared turns 3 - k (k in {1, 2} here)
    expected = sum(5 * (3 - x.tree.shared_turns) for x in leaves)
    assert tree_decoded == expected < flat_decoded
    # A branch's first prompt is its parent's tokens up to the node: all but its last token
    # come from the parent's kept KV. Before, each distinct branch prompt was prefilled whole.
    assert tree_prefill == prefill_of(leaves, lambda n: 1)
    assert tree_prefill < prefill_of(leaves, lambda n: n)
    assert flat_prefill > 0
    assert distinct_trajectories(leaves) == 12
    # Exact: the same leaves as prefilling every prompt from scratch (seeded per row).
    _, _, fresh = work["tree without kept KV"]
    for a, b in zip(leaves, fresh, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_a_training_step_on_trees_with_tree_grpo():
    """The trainer's path: collect plays trees (rollout.tree), the batch carries tree ids,
    tree_grpo's advantages train, the step logs decoded tokens, distinct trajectories and the
    prompt tokens whose KV the generator reused."""
    from agentic_rl.config.load import load_config
    from agentic_rl.train.loop import train_step
    from agentic_rl.train.setup import build, make_optimizer

    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=calculator",
            "env.topk=3",
            "algo.name=tree_grpo",
            "algo.entropy_coef=0.01",
            "rollout.tree.roots=2",
            "rollout.group_size=6",
            "rollout.max_turns=3",
            "rollout.max_tokens_per_turn=6",
        ],
        smoke=True,
    )
    setup = build(cfg)
    before = setup.generator.reused_tokens
    metrics = train_step(setup, make_optimizer(setup), step=1)
    assert metrics["skipped_update"] == 0.0
    # 2 tasks x 6 leaves; the roots decode every turn, a branch only its own turns
    assert 0 < metrics["decoded_tokens"] < 12 * 3 * 6
    assert 1 <= metrics["distinct_trajectories"] <= 12
    # the prompt tokens the generator did not prefill (later turns, branches from parents)
    assert metrics["reused_prompt_tokens"] == setup.generator.reused_tokens - before > 0


def test_tree_grpo_variant_entries_are_their_functions():
    from agentic_rl.algos.estimators import AdvantageInputs
    from agentic_rl.algos.tree import (
        response_span,
        tree_2norm_advantages,
        tree_inner_advantages,
        tree_per_token_advantages,
    )

    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    groups, trees = torch.tensor([0, 0, 0, 0]), torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]] * 1)
    mask = torch.cat([mask, torch.tensor([[0.0, 1.0, 1.0, 1.0]])])
    attention = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
    x = AdvantageInputs(
        rewards=rewards, mask=mask, group_ids=groups, tree_ids=trees, attention=attention
    )
    for name, per_row in {
        "tree_grpo_2norm": tree_2norm_advantages(rewards, groups, trees),
        "tree_grpo_inner": tree_inner_advantages(rewards, trees),
    }.items():
        adv, returns = ADVANTAGE_ESTIMATORS[name].fn(x)
        assert returns is None
        torch.testing.assert_close(adv, per_row[:, None] * mask)
    adv, returns = ADVANTAGE_ESTIMATORS["tree_grpo_per_token"].fn(x)
    response = response_span(mask, attention)
    assert response[0].tolist() == [False, True, True, True]  # the observation at 2 included
    per_token = tree_per_token_advantages(rewards, response, groups, trees)
    assert returns is None
    torch.testing.assert_close(adv, per_token * mask)  # trained tokens only
    assert adv[0, 2] == 0 and per_token[0, 2] != 0
    with pytest.raises(ValueError, match="attention mask"):
        ADVANTAGE_ESTIMATORS["tree_grpo_per_token"].fn(
            AdvantageInputs(rewards=rewards, mask=mask, group_ids=groups, tree_ids=trees)
        )


def pooled(lengths: list[int], rewards: list[float]) -> tuple[float, float]:
    """By hand: the values of a 0 token and of a 1 token in a pool of responses of these
    lengths, each with its reward on its last token (rewards 0 or 1)."""
    n, ones = sum(lengths), sum(rewards)
    mean = ones / n
    std = math.sqrt((ones * (1 - mean) ** 2 + (n - ones) * mean**2) / (n - 1))
    return -mean / std, (1 - mean) / std


def test_tree_grpo_per_token_by_hand_through_the_learner(tokenizer):
    """collate + compute_advantages hand the batch's attention mask over: every trained token
    of the played trees (each tree [1, 0, 0]) gets its task pool's value plus its tree pool's,
    computed by hand from the responses' lengths (first trained token to the end: the leaves
    end on their answer)."""
    leaves, _, _ = play_trees(tokenizer)
    batch = collate_episodes([[x] for x in leaves], tokenizer.pad_token_id)
    compute_advantages(batch, AlgoConfig(name="tree_grpo_per_token"))
    assert batch.advantages is not None
    length = [len(x.loss_mask) - x.loss_mask.index(1) for x in leaves]

    def pool(same: Callable[[Any], bool]) -> tuple[float, float]:
        members = [i for i, x in enumerate(leaves) if same(x)]
        return pooled([length[i] for i in members], [leaves[i].reward for i in members])

    for row, leaf in enumerate(leaves):
        task = pool(lambda x, leaf=leaf: x.group_id == leaf.group_id)
        tree = pool(lambda x, leaf=leaf: x.tree.tree_id == leaf.tree.tree_id)
        trained = batch.loss_mask[row] > 0
        expected = torch.full((int(trained.sum()),), task[0] + tree[0])
        if leaf.reward == 1.0:  # its last token holds the reward
            expected[-1] = task[1] + tree[1]
        # (rel: eps = 1e-6 on stds near 0.1 moves the reward token, ~23, by 2e-4)
        assert batch.advantages[row][trained].tolist() == pytest.approx(expected.tolist(), rel=1e-4)
        assert (batch.advantages[row][~trained] == 0).all()


def test_tree_grpo_entry_is_inter_plus_intra_on_its_inputs():
    from agentic_rl.algos.estimators import AdvantageInputs
    from agentic_rl.algos.tree import tree_grpo_advantages

    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups, trees = torch.tensor([0, 0, 0, 0]), torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    x = AdvantageInputs(rewards=rewards, mask=mask, group_ids=groups, tree_ids=trees)
    adv, returns = ADVANTAGE_ESTIMATORS["tree_grpo"].fn(x)
    per_row = tree_grpo_advantages(rewards, groups, trees)
    assert returns is None
    torch.testing.assert_close(adv, per_row[:, None] * mask)
    # tree 0 = [1, 0] (intra +-0.7071), tree 1 = [1, 1] (intra 0); group mean 0.75, std 0.5
    assert per_row.tolist() == pytest.approx([0.5 + 0.7071, -1.5 - 0.7071, 0.5, 0.5], abs=1e-4)


def leaf_episode(tree_id: str | None, leaf: int) -> list[Trajectory]:
    """One episode of one sample, a leaf of `tree_id` (None: outside any tree)."""
    position = TreePosition(tree_id=tree_id, leaf=leaf) if tree_id is not None else None
    sample = Trajectory(token_ids=[1], loss_mask=[1], logprobs=[0.0], prompt_length=0)
    sample.tree = position
    return [sample]


def test_train_leaf_indices_keeps_k_leaves_of_each_tree():
    # tree a: episodes 0-2; 3 outside any tree; tree b: 4-6; tree c: 7-8 (a leaf lost)
    samples = [
        *[leaf_episode("a", i) for i in range(3)],
        leaf_episode(None, 0),
        *[leaf_episode("b", i) for i in range(3)],
        *[leaf_episode("c", i) for i in range(2)],
    ]
    keep = train_leaf_indices(samples, 2, seed=5)
    assert keep == sorted(keep)
    assert len({0, 1, 2} & set(keep)) == 2 and len({4, 5, 6} & set(keep)) == 2
    assert {3, 7, 8} <= set(keep) and len(keep) == 7
    assert train_leaf_indices(samples, 2, seed=5) == keep  # seeded
    assert train_leaf_indices(samples, 3, seed=5) == list(range(9))  # K >= every tree's leaves


def test_train_leaf_indices_draws_uniformly_without_replacement():
    """Each of a tree's 3 leaves trains with probability K/3 = 2/3, each pair 1/3 of the
    time (the reference shuffles and keeps the first K): counted over 3000 seeds."""
    samples = [leaf_episode("a", i) for i in range(3)]
    draws = [tuple(train_leaf_indices(samples, 2, seed)) for seed in range(3000)]
    for i in range(3):
        assert sum(i in d for d in draws) / 3000 == pytest.approx(2 / 3, abs=0.03)
    for pair in [(0, 1), (0, 2), (1, 2)]:
        assert draws.count(pair) / 3000 == pytest.approx(1 / 3, abs=0.03)


def test_collect_trains_k_leaves_of_each_tree():
    """collect plays every leaf (the step's rollout metrics count them) and trains K of each
    tree: with 2 trees of 3 leaves per task and K = 2, a task's group is 4 leaves."""
    from agentic_rl.config.load import load_config
    from agentic_rl.train.collect import collect
    from agentic_rl.train.setup import build

    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "env.name=calculator",
            "env.topk=3",
            "algo.name=tree_grpo",
            "rollout.tree.roots=2",
            "rollout.tree.train_leaves=2",
            "rollout.group_size=6",
            "rollout.max_turns=2",
            "rollout.max_tokens_per_turn=4",
        ],
        smoke=True,
    )
    kept, generated, _ = collect(build(cfg), step=1)
    tasks = cfg.rollout.tasks_per_step
    assert len(generated) == tasks * 6 and len(kept) == tasks * 4
    trees: dict[str, int] = {}
    for samples in kept.samples:
        trees[samples[0].tree.tree_id] = trees.get(samples[0].tree.tree_id, 0) + 1
    assert sorted(trees.values()) == [2] * (2 * tasks)
    assert all(len(group) == 4 for group in kept.groups())

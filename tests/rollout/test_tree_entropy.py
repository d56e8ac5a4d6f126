"""ARPO's entropy-triggered branching (rollout.tree.branch=entropy, rollout/arpo.py): branches
where the entropy after a tool result rose and not where it fell, the budget of leaves per task,
prefixes copied token for token, fresh roots when no leaf is live; the HF generator's entropies;
the load-time refusals; a training step on the tiny model."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.sampling import sampling_entropy
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import RolloutConfig, TreeConfig
from agentic_rl.config.validate_tree import entropy_tree_steps
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.chat import TagFormat
from agentic_rl.learner.batch import collate_episodes
from agentic_rl.rollout.tree import decoded_tokens, run_tree_episodes
from agentic_rl.types import Completion, SamplingParams

MAX_TURNS = 4
HIGH, LOW = 5.0, 0.1  # token entropies (nats) the scripted generator reports


def entropy_cfg(roots: int = 2, group: int = 5, **tree: Any) -> RolloutConfig:
    # w = 100 and tau = 0: a copy iff u < 100 dH, i.e. (for any draw u) iff the entropy rose
    settings = dict(branch="entropy", entropy_weight=100.0, branch_threshold=0.0, beam_size=2)
    return RolloutConfig(
        max_turns=MAX_TURNS,
        max_tokens_per_turn=64,
        max_total_tokens=512,
        group_size=group,
        tree=TreeConfig(roots=roots, **{**settings, **tree}),
    )


class EntropyActor:
    """Two calculator calls then an answer, each turn's text naming its act_turn (so a branch's
    own turns differ from its parent's). The token entropies are scripted per task and turn
    index: turn 0 low, turn 1 `after_tool[task]`, turn 2 low. Records every prompt."""

    def __init__(self, tokenizer: Any, after_tool: dict[str, float], first: str = "calc") -> None:
        self.tokenizer, self.after_tool, self.first = tokenizer, after_tool, first
        self.prompts: list[tuple[str, int, list[int]]] = []

    def __call__(self, episodes: list, budgets: list[int], act_turn: int) -> list[Completion]:
        out = []
        for ep in episodes:
            turn = len(ep.turn_spans)
            self.prompts.append((ep.group_id, turn, list(ep.token_ids)))
            if turn == 0 and self.first == "none":
                text = "I am not sure."  # no action: an error observation, not a tool result
            elif turn < 2:
                text = f"<calc>{act_turn}+{turn}</calc>"
            else:
                text = f"<answer>{ep.task.answers[0]}</answer>"
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            h = self.after_tool[ep.task.task_id] if turn == 1 else LOW
            lps = [-0.5 - 0.01 * i for i in range(len(ids))]
            out.append(Completion(ids, lps, "stop", text, entropies=[h] * min(3, len(ids))))
        return out


def play(
    tokenizer: Any,
    rises: list[bool],
    env_type: type = CalculatorEnv,
    first: str = "calc",
    **kw: Any,
):
    tasks = make_calculator_tasks("eval", len(rises), seed=0)
    cfg = entropy_cfg(**kw)
    expanded = [t for t in tasks for _ in range(cfg.group_size)]
    groups = [f"1:{t.task_id}" for t in expanded]
    envs = [env_type() for _ in expanded]
    after = {t.task_id: HIGH if up else 0.0 for t, up in zip(tasks, rises, strict=True)}
    act = EntropyActor(tokenizer, after, first)
    samples = run_tree_episodes(
        envs, expanded, groups, act, TagFormat(envs[0].tools), tokenizer, cfg, seed=3
    )
    leaves = [s for ep in samples for s in ep]
    by_task: dict[str, list] = {}
    for leaf in leaves:
        by_task.setdefault(leaf.task_id, []).append(leaf)
    return [by_task[t.task_id] for t in tasks], act


def test_branches_where_the_entropy_rose_and_not_where_it_fell(tokenizer):
    (rose, fell), act = play(tokenizer, [True, False])
    # The budget: exactly M = 5 leaves per task.
    assert len(rose) == len(fell) == 5
    # Rose: each root's node 1 (after its first tool result, dH > 0) got one copy (beam 2);
    # node 2 (dH = 0) none; the fifth slot is a fresh root once no leaf was live.
    shapes = [
        (x.tree.tree_id.split("#")[1], x.tree.leaf, x.tree.parent, x.tree.shared_turns)
        for x in rose
    ]
    assert shapes == [
        ("0", 0, -1, 0),
        ("1", 0, -1, 0),
        ("0", 1, 0, 1),
        ("1", 1, 0, 1),
        ("2", 0, -1, 0),
    ]
    # Fell: no branch at all; three fresh roots, one at a time, fill the budget.
    assert [(x.tree.leaf, x.tree.parent) for x in fell] == [(0, -1)] * 5
    assert len({x.tree.tree_id for x in fell}) == 5
    roots = {x.tree.tree_id: x for x in rose if x.tree.parent < 0}
    for branch in rose[2:4]:
        pos, root = branch.tree, roots[branch.tree.tree_id]
        n = pos.shared_tokens
        assert n == root.turn_spans[1][0]  # the node after turn 0 and its tool result
        assert branch.token_ids[:n] == root.token_ids[:n]
        assert branch.loss_mask[:n] == root.loss_mask[:n]
        assert branch.logprobs[:n] == root.logprobs[:n]
        assert branch.token_versions[:n] == root.token_versions[:n]
        assert branch.turn_spans[:1] == root.turn_spans[:1]
        assert branch.step_rewards[:1] == root.step_rewards[:1]
        assert branch.token_ids[n:] != root.token_ids[n:]  # its own turn 1 onwards
        assert len(branch.turn_spans) == 3 and branch.reward == 1.0
        # the generator was asked to continue exactly the shared prefix at turn index 1
        assert (branch.group_id, 1, branch.token_ids[:n]) in act.prompts
        # a branch's decoded tokens are its own turns only
        assert decoded_tokens(branch) == sum(branch.loss_mask[n:]) < sum(branch.loss_mask)


def test_a_node_after_an_action_that_is_not_a_tool_call_never_branches(tokenizer):
    # Turn 0 writes no action (an error observation follows), turn 1's entropy rises: no copy.
    (leaves,), _ = play(tokenizer, [True], first="none")
    assert [(x.tree.leaf, x.tree.parent) for x in leaves] == [(0, -1)] * 5
    # the episodes went on after the error observation: node 2 followed a tool call, but the
    # turn sampled from it has dH = 0
    assert all(len(x.turn_spans) == 3 and x.metrics["invalid_actions"] == 1 for x in leaves)


def test_the_budget_caps_the_copies_and_beam_size_gives_more_per_point(tokenizer):
    # group 3, roots 2: one slot for two rising nodes; the first root in slot order takes it
    (leaves,), _ = play(tokenizer, [True], group=3)
    assert [(x.tree.tree_id[-1], x.tree.leaf, x.tree.parent) for x in leaves] == [
        ("0", 0, -1),
        ("1", 0, -1),
        ("0", 1, 0),
    ]
    # beam 3, one root, budget 4: its node 1 gets 2 copies; then the copies' own node 2 and
    # the root's node 2 have dH = 0 (no copy); a fresh root fills the last slot
    (leaves,), _ = play(tokenizer, [True], roots=1, group=4, beam_size=3)
    assert [
        (x.tree.tree_id[-1], x.tree.leaf, x.tree.parent, x.tree.shared_turns) for x in leaves
    ] == [("0", 0, -1, 0), ("0", 1, 0, 1), ("0", 2, 0, 1), ("1", 0, -1, 0)]
    a, b = leaves[1], leaves[2]
    n = a.tree.shared_tokens
    assert a.token_ids[:n] == b.token_ids[:n]  # one node, two copies ...
    # ... sampled together in one call at the same turn: the scripted text is the same, the
    # slots and their envs are their own
    assert a.tree.leaf != b.tree.leaf


def test_fork_and_replay_give_the_same_entropy_trees(tokenizer, forking_calculator):
    replayed, _ = play(tokenizer, [True, False])
    forked, _ = play(tokenizer, [True, False], env_type=forking_calculator)
    # roots only (2 + 1 fresh for the rising task, 2 + 3 fresh for the other): no replay
    assert forking_calculator.resets == 8
    for a, b in zip(sum(replayed, []), sum(forked, []), strict=True):
        assert (a.token_ids, a.loss_mask, a.logprobs, a.tree) == (
            b.token_ids,
            b.loss_mask,
            b.logprobs,
            b.tree,
        )
        assert (a.reward, a.step_rewards) == (b.reward, b.step_rewards)


def test_tree_ids_reach_the_batch(tokenizer):
    (rose, fell), _ = play(tokenizer, [True, False])
    batch = collate_episodes([[x] for x in rose + fell], tokenizer.pad_token_id)
    assert batch.tree_ids is not None
    # rose: trees 0, 1, then their branches, then a fresh tree; fell: five trees of one leaf
    assert batch.tree_ids.tolist() == [0, 1, 0, 1, 2, 3, 4, 5, 6, 7]


def test_a_generator_without_entropies_and_an_env_without_tools_are_refused(tokenizer):
    tasks = make_calculator_tasks("eval", 1, seed=0)
    cfg = entropy_cfg(group=3)
    expanded, groups = tasks * 3, ["g"] * 3
    act = EntropyActor(tokenizer, {tasks[0].task_id: HIGH})

    def blind(episodes, budgets, act_turn):
        out = act(episodes, budgets, act_turn)
        for c in out:
            c.entropies = None
        return out

    envs = [CalculatorEnv() for _ in expanded]
    with pytest.raises(ValueError, match="returned no token entropies"):
        run_tree_episodes(
            envs, expanded, groups, blind, TagFormat(envs[0].tools), tokenizer, cfg, seed=0
        )
    for env in envs:
        env.tools = []
    with pytest.raises(ValueError, match="CalculatorEnv has no tools"):
        run_tree_episodes(envs, expanded, groups, act, TagFormat([]), tokenizer, cfg, seed=0)
    with pytest.raises(ValueError, match="more than rollout.tree.roots=2"):
        run_tree_episodes(
            envs[:2], expanded[:2], groups[:2], act, TagFormat([]), tokenizer, cfg, seed=0
        )


# ---- the HF generator's entropies -------------------------------------------------------------


def test_sampling_entropy_by_hand():
    # uniform over 4: log 4
    assert sampling_entropy(torch.zeros(1, 4), [1.0], [1.0]).tolist() == pytest.approx(
        [math.log(4)]
    )
    # T = 2 on logits [0, ln 4]: p = [1/3, 2/3], H = ln 3 / 3 + 2/3 ln 1.5 = 0.63651
    logits = torch.tensor([[0.0, math.log(4)]])
    assert sampling_entropy(logits, [2.0], [1.0]).tolist() == pytest.approx([0.63651], abs=1e-5)
    # top-p 0.6 on p = [0.5, 0.3, 0.2]: nucleus {0.5, 0.3}, renormalised [0.625, 0.375]
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    h = -(0.625 * math.log(0.625) + 0.375 * math.log(0.375))
    assert sampling_entropy(logits, [1.0], [0.6]).tolist() == pytest.approx([h], abs=1e-5)
    # a greedy row reports its temperature-1 distribution's, beside a sampled row
    both = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]]))
    h1 = -(0.5 * math.log(0.5) + 0.3 * math.log(0.3) + 0.2 * math.log(0.2))
    assert sampling_entropy(both, [0.0, 1.0], [1.0, 0.6]).tolist() == pytest.approx(
        [h1, h], abs=1e-5
    )


def test_hf_generator_reports_entropies_only_when_asked(tiny, tokenizer):
    prompt = tokenizer.encode("Compute 12 + 30.", add_special_tokens=False)
    asked = SamplingParams(max_new_tokens=6, temperature=1.0, seed=5, entropy_tokens=3)
    plain = SamplingParams(max_new_tokens=6, temperature=1.0, seed=5)
    gen = HFGenerator(tiny, tokenizer, prefix_cache=False)
    a, p = gen.generate([prompt], asked)[0], gen.generate([prompt], plain)[0]
    assert p.entropies is None
    # the same tokens and logprobs: asking for entropies does not touch the sampling
    assert a.token_ids == p.token_ids and a.logprobs == p.logprobs
    assert len(a.entropies) == min(3, len(a.token_ids)) == 3
    # the first one, by hand from the model's logits after the prompt (temperature 1)
    with torch.no_grad():
        logits = tiny(torch.tensor([prompt])).logits[0, -1].float()
    logp = torch.log_softmax(logits, -1)
    assert a.entropies[0] == pytest.approx(float(-(logp.exp() * logp).sum()), abs=1e-4)
    assert 0 < a.entropies[0] <= math.log(len(tokenizer)) + 1e-4


# ---- load-time refusals ------------------------------------------------------------------------

ARPO = [
    "env.name=calculator",
    "env.topk=3",
    "rollout.tree.roots=2",
    "rollout.group_size=6",
    "rollout.tree.branch=entropy",
]


def test_entropy_trees_load_with_grpo_and_tree_grpo():
    cfg = load_config(None, ARPO)
    assert cfg.rollout.tree.branch == "entropy" and cfg.algo.name == "grpo"
    assert load_config(None, [*ARPO, "algo.name=tree_grpo"]).algo.name == "tree_grpo"
    # (6 - 2 + 1) x (2 x 4 - 1) steps at most
    assert entropy_tree_steps(cfg.rollout) == 35


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.tree.branch=beam"], "rollout.tree.branch must be one of random, entropy"),
        (["rollout.tree.expansions=3"], "rollout.tree.expansions acts only with .*branch=random"),
        (["rollout.group_size=2"], "rollout.group_size=2 is ARPO's budget .* must exceed"),
        (["rollout.tree.beam_size=1"], "rollout.tree.beam_size must be >= 2"),
        (["rollout.tree.entropy_tokens=0"], "rollout.tree.entropy_tokens must be >= 1"),
        (["rollout.tree.branch_threshold=1.0"], "rollout.tree.branch_threshold must be in"),
        (["rollout.tree.entropy_weight=-0.1"], "rollout.tree.entropy_weight must be >= 0"),
        (["rollout.max_turns=1"], "rollout.max_turns must be >= 2"),
        (["rollout.backend=vllm"], "rollout.backend=vllm does not give"),
        (["rollout.think_budget=16"], "rollout.think_budget does not give"),
        (["rollout.mode=step", "algo.name=gigpo", "env.name=gridworld"], "rollout.mode=step"),
        (["rollout.group_size=200"], "must stay below 1000"),
    ],
)
def test_entropy_settings_that_cannot_act_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*ARPO, *overrides])


def test_arpo_keys_without_entropy_branching_are_refused():
    with pytest.raises(ConfigError, match="rollout.tree.entropy_weight acts only with"):
        load_config(None, [*ARPO[:4], "rollout.tree.entropy_weight=0.5"])
    with pytest.raises(ConfigError, match="rollout.tree.branch is set but does nothing"):
        load_config(None, ["rollout.tree.branch=entropy"])
    with pytest.raises(ConfigError, match="rollout.tree.beam_size is set but does nothing"):
        load_config(None, ["rollout.tree.beam_size=3"])


def test_an_env_that_cannot_branch_is_refused(monkeypatch):
    monkeypatch.setattr(CalculatorEnv, "branchable", False, raising=False)
    with pytest.raises(ConfigError, match="env.name=calculator declares branchable = False"):
        load_config(None, ARPO)


# ---- the trainer's path ------------------------------------------------------------------------


def test_a_training_step_on_entropy_trees():
    """collect plays entropy trees with the real HF generator on the tiny model (it never
    writes a tag, so no tool result and no branch: fresh roots fill the budget), GRPO over
    the task's leaves trains, the step logs decoded tokens and distinct trajectories."""
    from agentic_rl.train.loop import train_step
    from agentic_rl.train.setup import build, make_optimizer

    cfg = load_config(
        None,
        [
            "model.name=tiny",
            *ARPO[:4],
            "rollout.tree.branch=entropy",
            "rollout.group_size=4",
            "algo.entropy_coef=0.01",
            "rollout.max_turns=2",
            "rollout.max_tokens_per_turn=6",
        ],
        smoke=True,
    )
    setup = build(cfg)
    metrics = train_step(setup, make_optimizer(setup), step=1)
    assert metrics["skipped_update"] == 0.0
    assert 0 < metrics["decoded_tokens"] <= 2 * 4 * 2 * 6
    assert 1 <= metrics["distinct_trajectories"] <= 8

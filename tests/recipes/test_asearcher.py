"""The `asearcher` recipe: long web-search episodes whose context is kept within a token budget.

Mechanisms checked through the trainer: with the recipe's budget no generation step is shown
more than `rollout.context_budget` tokens, while the same episodes without the budget are; an
episode becomes several segments that carry its one GRPO advantage, and each policy token is
trained exactly once; ASearcher's reward (F1 x format flags) reaches the batch.
"""

from __future__ import annotations

import torch

from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

# the smoke run skips the evaluation before training: the shared CPU is the bottleneck
LIGHT = ["trainer.eval_before=false"]
SMOKE = ["model.name=tiny", "trainer.progress=false"]


def test_asearcher_smoke(tmp_path):
    cfg = load_config("asearcher", [*SMOKE, *LIGHT, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.rollout.context_budget == 384 and cfg.rollout.max_turns == 6
    assert cfg.rollout.max_staleness == 1  # rollouts run asynchronously from the updates
    summary = train_recipe(cfg)
    assert summary["steps"] == 2 and "after" in summary
    rows = read_metrics(tmp_path / "asearcher" / "metrics.jsonl")
    assert sum("train/reward" in r for r in rows) == 2
    assert any("warm_start/last_loss" in r for r in rows)


def rollout(scripted, overrides):
    """One training batch of the recipe with group size 2: sample 0 of a group follows the
    expert, sample 1 too but answers wrong. Also returns the context length of every turn."""
    cfg = load_config("asearcher", [*SMOKE, "rollout.group_size=2", *overrides])
    setup = build(cfg)
    contexts = []

    def script(ep, index, turn):
        contexts.append(len(ep.token_ids))  # what this turn is generated from
        text = ep.env.expert_turn()
        if index == 1 and "<answer>" in text:
            return "<think>I will guess.</think><answer>nowhere</answer>"
        return text

    scripted(script)
    episodes, _, _ = collect(setup, step=1)
    return setup, episodes, contexts


def test_contexts_stay_within_the_budget_and_exceed_it_without(scripted):
    setup, episodes, contexts = rollout(scripted, [])
    budget = setup.cfg.rollout.context_budget
    assert max(contexts) <= budget
    _, plain, unbounded = rollout(scripted, ["rollout.context_budget=0"])
    assert max(unbounded) > budget  # the ablation: the whole history every turn
    assert all(len(samples) == 1 for samples in plain.samples)
    # same episodes, same rewards: F1 x format = 1 for the expert, 0 for the wrong answer
    assert episodes.rewards().tolist() == plain.rewards().tolist() == [1.0, 0.0, 1.0, 0.0]
    assert all(len(samples) > 1 for samples in episodes.samples)  # cut into segments
    for segmented, whole in zip(episodes.samples, plain.samples, strict=True):
        assert sum(sum(s.loss_mask) for s in segmented) == sum(whole[0].loss_mask)
    batch = prepare_batch(setup, episodes)
    rows = batch.loss_mask.argmax(dim=1)
    first = batch.advantages[torch.arange(len(batch)), rows]
    # GRPO over [1, 0]: +-(0.5 / std) = +-0.7071, on every segment of the episode
    expected = torch.tensor([0.7071, -0.7071, 0.7071, -0.7071])[batch.episode_index]
    assert torch.allclose(first, expected, atol=1e-4)


def test_turn_credit_reads_the_segments_as_one_episode(scripted):
    # MT-GRPO on the segmented episodes gives each turn the advantage it gets when the same
    # episodes are one row each (the turns' rewards and order are read over the segments)
    mt = ["algo.name=mt_grpo"]
    setup, episodes, _ = rollout(scripted, mt)
    plain_setup, plain, _ = rollout(scripted, [*mt, "rollout.context_budget=0"])
    assert all(len(samples) > 1 for samples in episodes.samples)
    cut = prepare_batch(setup, episodes)
    whole = prepare_batch(plain_setup, plain)
    assert cut.episode_turns and int(cut.num_turns[0]) == int(whole.num_turns[0]) > 1
    assert whole.advantages.abs().sum() > 0
    for e in range(len(episodes.samples)):
        rows = (cut.episode_index == e).nonzero().flatten().tolist()
        per_turn = {}
        for row in rows:
            for k in cut.turn_ids[row][cut.loss_mask[row] > 0].unique().tolist():
                on = (cut.turn_ids[row] == k) & (cut.loss_mask[row] > 0)
                per_turn[k] = cut.advantages[row][on]
        for k, values in per_turn.items():
            on = (whole.turn_ids[e] == k) & (whole.loss_mask[e] > 0)
            torch.testing.assert_close(values, whole.advantages[e][on], atol=1e-5, rtol=0)
        assert sorted(per_turn) == list(range(int(whole.num_turns[e])))

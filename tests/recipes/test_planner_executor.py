"""The `planner_executor` recipe: a planner / executor team (MATPO-style roles in one model).

Mechanism checked: the executor's samples inherit the team's group advantage (a team that
delegated and answered right gives its executor's samples a positive advantage, a team that
guessed gives its planner a negative one), and `rollout.train_roles` keeps a frozen role's
samples out of the gradient while its episode still counts in the group.
"""

from __future__ import annotations

import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def team_vs_guesser(first: list[str]):
    """Episode 0 of the first group plays the scripted team; the others' planner guesses."""

    def script(ep, index, turn):
        if not first:
            first.append(ep.group_id)
        if ep.group_id == first[0] and index == 0:
            return ep.env.expert_turn()
        return "<answer>nowhere</answer>"

    return script


def test_planner_executor_smoke(tmp_path, scripted):
    # the first episode of every group plays the scripted team, the others guess
    scripted(lambda ep, index, turn: ep.env.expert_turn() if index == 0 else "<answer>x</answer>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=pe"]
    assert main(["train", "planner_executor", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "pe" / "metrics.jsonl") if "train/reward" in r]
    assert rows and rows[0]["train/env/executor_conversations"] > 0


def test_executor_inherits_the_team_advantage_and_frozen_roles_do_not_train(scripted):
    for train_roles, trained in (("[]", {"planner", "executor"}), ("[planner]", {"planner"})):
        cfg = load_config("planner_executor", [*SMOKE, f"rollout.train_roles={train_roles}"])
        setup = build(cfg)
        first: list[str] = []
        scripted(team_vs_guesser(first))
        kept, _, _ = collect(setup, 1)
        group = [ep for ep in kept.samples if ep[0].group_id == first[0]]
        team, guesser = group[0], group[1]
        assert [s.role for s in team][:3] == ["planner", "executor", "executor"]
        assert team[0].reward == 1.0 and guesser[0].reward == 0.0
        batch = prepare_batch(setup, kept)
        for r, e in enumerate(batch.episode_index.tolist()):
            sample_mask = batch.loss_mask[r] > 0
            values = batch.advantages[r][sample_mask]
            if kept.samples[e] is team:
                # every sample of the team's trained roles shares the positive advantage
                assert values.numel() == 0 or torch.all(values > 0)
            elif kept.samples[e] is guesser:
                assert torch.all(values < 0)
        roles_with_tokens = {s.role for ep in kept.samples for s in ep if sum(s.loss_mask) > 0}
        assert roles_with_tokens == trained

"""The GiGPO recipes on the household and shop envs (`gigpo_household`, `gigpo_webshop`).

Mechanism checked (both): steps of one episode group that act on the same env state (the same
game facts / the same page state) fall into one anchor step group, and the step advantage
separates the good action from the bad one taken there: at the shared start state the expert's
first step gets A = A_E + A_S with A_S > 0 and a wasted step A_S < 0. Without the anchors
(each step its own group) that term is zero, which the test also shows.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate_episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# household games compile on first use (a few seconds each): keep the smoke runs small
SMALL = ["env.num_train_tasks=2", "env.num_eval_tasks=2", "warm_start.num_tasks=2"]


def train_rows(run):
    return [r for r in read_metrics(run / "metrics.jsonl") if "train/reward" in r]


def expert_first_of_group(ep, index, turn):
    """Episode 0 of each group plays the expert; the others write an invalid action."""
    return ep.env.expert_turn() if index == 0 else "<action>dance[now]</action>"


@pytest.mark.parametrize("recipe", ["gigpo_household", "gigpo_webshop"])
def test_smoke_trains_steps_with_step_advantages(recipe, tmp_path, scripted):
    if recipe == "gigpo_household":
        pytest.importorskip("textworld")
    scripted(expert_first_of_group)
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run"]
    assert main(["train", recipe, *SMOKE, *SMALL, *out, "--smoke"]) == 0
    rows = train_rows(tmp_path / "run")
    assert len(rows) == 2
    for row in rows:
        assert row["train/samples"] > row["train/episodes"]  # step-wise samples
        # the start state is shared by the group: a step group with different returns
        assert row["train/shared_step_groups"] > 0 and row["train/step_adv_nonzero"] > 0
        assert row["train/invalid_actions_per_episode"] > 0


def waste_of(ep) -> str:
    """A legal action that is not the expert's: the household's first other admissible
    command, or a search for something else in the shop."""
    if ep.env.action_names == ["search[...]"]:
        return "search[blue thing]"
    best = ep.env.expert_turn()
    return next(c for c in ep.env.action_names if f"<action>{c}" not in best)


def wasted_then_expert(ep, index, turn):
    """Episode 0: the expert. Episode 1: a wasted action first, then the expert. Others:
    invalid actions."""
    if index == 1 and turn == 0:
        return f"<action>{waste_of(ep)}</action>"
    if index in (0, 1):
        return ep.env.expert_turn()
    return "<action>dance[now]</action>"


@pytest.mark.parametrize("recipe", ["gigpo_household", "gigpo_webshop"])
def test_anchor_step_groups_separate_good_and_bad_actions(recipe, scripted):
    if recipe == "gigpo_household":
        pytest.importorskip("textworld")
    cfg = load_config(recipe, [*SMOKE, *SMALL, "rollout.max_turns=8"], smoke=True)
    assert cfg.rollout.mode == "step" and cfg.algo.name == "gigpo" and cfg.gigpo.omega == 1.0
    setup = build(cfg)
    task = setup.train_tasks[0]
    act = scripted(wasted_then_expert)
    episodes = play(setup, [task] * 4, ["g"] * 4, act, seed=0)
    expert, detour, *failed = episodes
    assert expert[-1].metrics["success"] == 1.0 and detour[-1].metrics["success"] == 1.0
    assert all(e[-1].metrics["success"] == 0.0 for e in failed)
    starts = [e[0].anchors[0] for e in episodes]
    assert len(set(starts)) == 1  # a group starts in one state
    batch = collate_episodes(episodes, setup.tokenizer.pad_token_id, cfg.gigpo)
    first_rows = [sum(len(e) for e in episodes[:i]) for i in range(4)]
    groups = batch.step_group_ids.tolist()
    assert len({groups[r] for r in first_rows}) == 1  # the start steps share a step group
    compute_advantages(batch, cfg.algo, cfg.gigpo)
    gigpo = batch.advantages.sum(1) / batch.loss_mask.sum(1)
    plain = collate_episodes(episodes, setup.tokenizer.pad_token_id, cfg.gigpo)
    plain.step_group_ids = torch.arange(len(plain))  # no anchors: every step alone
    compute_advantages(plain, cfg.algo, cfg.gigpo)
    episode_only = plain.advantages.sum(1) / plain.loss_mask.sum(1)
    step_term = gigpo - episode_only
    e0, d0 = first_rows[0], first_rows[1]
    # at the shared start state the expert's step returns more than the wasted step
    assert batch.step_returns[e0] > batch.step_returns[d0]
    assert step_term[e0] > 0 and step_term[d0] < step_term[e0]
    # a wasted step (the detour) may share the expert's episode reward, not its step advantage
    assert gigpo[e0] > gigpo[d0]
    assert torch.count_nonzero(step_term) > 0

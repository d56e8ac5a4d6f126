"""The MT-GRPO recipe on the grid world (`mt_grpo_gridworld`).

Mechanism checked: two episodes of one group that both reach the goal earn the same return
(the progress reward is potential-based shaping: it sums to 0.1 x the start distance however
the agent walks), so episode-level GRPO gives their first moves the same advantage; MT-GRPO's
turn advantage, normalised over the group's first turns, pays the move toward the goal and
charges the move away, by the values computed by hand below. Without the progress reward
(distance_reward=0) the two first turns score alike and the separation is gone; under GRPO
every turn of an episode gets its one advantage.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.games.gridworld import MOVES, SIZE, GridWorldEnv, inside, shortest_path
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import Episodes, collate_episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def away_move(env) -> str | None:
    """A legal move that lengthens the shortest path to the goal, if the cell has one."""
    for direction, (dr, dc) in MOVES.items():
        target = (env.position[0] + dr, env.position[1] + dc)
        if target in env.walls or not inside(target, SIZE):
            continue
        if len(shortest_path(env.walls, target, env.goal)) > env.distance():
            return direction
    return None


def detour_then_expert(ep, index, turn):
    """Episode 0: the expert. Episode 1: one move away from the goal, then the expert.
    Others: a malformed move every turn."""
    if index == 1 and turn == 0:
        return f"<action>{away_move(ep.env)}</action>"
    if index in (0, 1):
        return ep.env.expert_turn()
    return "<action>dance</action>"


def first_and_last_turn_advantages(batch, row):
    """The advantage on the sampled tokens of the row's first and of its last turn."""
    turns = batch.turn_ids[row]
    trained = batch.loss_mask[row].bool()
    last = int(turns.max())
    first_adv = batch.advantages[row][(turns == 0) & trained]
    last_adv = batch.advantages[row][(turns == last) & trained]
    assert torch.allclose(first_adv, first_adv[0]) and torch.allclose(last_adv, last_adv[0])
    return float(first_adv[0]), float(last_adv[0])


def played_group(overrides, scripted):
    # the recipe's own turn limit (not --smoke's 2): the detour needs d_start + 2 moves
    small = ["env.num_train_tasks=16", "env.num_eval_tasks=4"]
    cfg = load_config("mt_grpo_gridworld", [*SMOKE, *small, *overrides])
    setup = build(cfg)
    task = next(t for t in setup.train_tasks if has_away_move(t))
    episodes = play(setup, [task] * 4, ["g"] * 4, scripted(detour_then_expert), seed=0)
    if cfg.rollout.mode == "step":  # the trainer's path: the turns read over each episode's rows
        batch = prepare_batch(setup, Episodes(episodes, [task] * 4))
    else:
        batch = collate_episodes(episodes, setup.tokenizer.pad_token_id)
        compute_advantages(batch, cfg.algo)
    return cfg, episodes, batch


def has_away_move(task) -> bool:
    env = GridWorldEnv()
    env.reset(task, 0)
    return away_move(env) is not None


def test_smoke_trains(tmp_path):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=mt"]
    assert main(["train", "mt_grpo_gridworld", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "mt" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
    for row in rows:  # one row per episode, its turns credited within it
        assert row["train/samples"] == row["train/episodes"]
        assert row["train/turns"] > 1
    # step mode (one row a move), the turn-level critic and the turn-level ratio train too
    step = ["rollout.mode=step", "algo.name=turn_ppo", "algo.policy_loss=turn"]
    step += ["trainer.run_name=steps"]
    assert main(["train", "mt_grpo_gridworld", *SMOKE, *out[:1], *step, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "steps" / "metrics.jsonl") if "train/reward" in r]
    assert rows and all(r["train/samples"] > r["train/episodes"] for r in rows)


def test_turn_advantage_pays_the_move_toward_the_goal(scripted):
    cfg, episodes, batch = played_group([], scripted)
    assert cfg.algo.name == "mt_grpo" and cfg.algo.turn_advantage_coef == 1.0
    assert cfg.rollout.mode == "episode"
    expert, detour, *failed = (samples[0] for samples in episodes)
    assert expert.metrics["success"] == detour.metrics["success"] == 1.0
    assert all(f.metrics["success"] == 0.0 for f in failed)
    assert expert.step_rewards[0] == pytest.approx(0.1)  # one step closer
    assert detour.step_rewards[0] == pytest.approx(-0.1)  # one step away
    assert all(f.step_rewards[0] == pytest.approx(-0.1) for f in failed)  # format penalty
    assert expert.reward == pytest.approx(detour.reward)  # shaping telescopes: same return
    expert_first, expert_last = first_and_last_turn_advantages(batch, 0)
    detour_first, detour_last = first_and_last_turn_advantages(batch, 1)
    outcome = expert_last
    assert detour_last == pytest.approx(outcome) and outcome > 0
    # First-turn rewards [0.1, -0.1, -0.1, -0.1]: mean -0.05, unbiased std 0.1, so
    # A^T = [1.5, -0.5, -0.5, -0.5], added to the outcome advantage on the first turn.
    assert expert_first == pytest.approx(outcome + 1.5, abs=1e-4)
    assert detour_first == pytest.approx(outcome - 0.5, abs=1e-4)


def test_in_step_mode_each_step_row_gets_its_turns_credit(scripted):
    # rollout.mode=step: one row a move, each conditioned on the recent moves only; the expert's
    # and the detour's first-move rows get the same hand-computed advantages as in episode mode
    cfg, episodes, batch = played_group(["rollout.mode=step", "rollout.history_window=2"], scripted)
    assert cfg.rollout.mode == "step" and batch.episode_turns
    expert, detour = episodes[0], episodes[1]
    assert len(expert) > 1 and len(detour) > 1 and len(batch) == sum(len(e) for e in episodes)
    first = {0: 0, 1: len(expert)}  # the first row of each
    last = len(expert) - 1
    adv = {r: batch.advantages[r][batch.loss_mask[r].bool()] for r in (0, last, first[1])}
    for values in adv.values():
        assert torch.allclose(values, values[0])
    outcome = float(adv[last][0])
    assert outcome > 0
    assert float(adv[0][0]) == pytest.approx(outcome + 1.5, abs=1e-4)
    assert float(adv[first[1]][0]) == pytest.approx(outcome - 0.5, abs=1e-4)


def test_without_turn_rewards_or_with_grpo_the_first_moves_are_not_told_apart(scripted):
    # No progress reward: the two first moves score alike (0), so their turn advantages are
    # equal (the malformed moves' -0.1 still sets them above the others')
    _, _, batch = played_group(["env.options.distance_reward=0"], scripted)
    expert_first, expert_last = first_and_last_turn_advantages(batch, 0)
    detour_first, _ = first_and_last_turn_advantages(batch, 1)
    assert expert_first == pytest.approx(detour_first, abs=1e-6)
    assert expert_first > expert_last
    # Episode-level GRPO: one advantage per episode, on every turn
    _, _, batch = played_group(["algo.name=grpo"], scripted)
    expert_first, expert_last = first_and_last_turn_advantages(batch, 0)
    detour_first, _ = first_and_last_turn_advantages(batch, 1)
    assert expert_first == pytest.approx(detour_first, abs=1e-6)
    assert expert_first == pytest.approx(expert_last, abs=1e-6)

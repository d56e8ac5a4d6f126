"""The `vln_r1` recipe: SFT on the shortest-path expert, then GRPO, on route instructions in a
generated house, 6-action chunks, VLN-R1's time-decayed reward.

Mechanisms checked: the two stages run in order (SFT then RL from its weights); a model turn
is a chunk of 6 actions, parsed and executed in order; each chunk is rewarded with the decayed
match against the expert's next actions, so moving a mistake from the last position to the
first lowers the reward, and removing the decay (gamma = 1) makes the two equal; the episode
reward cannot grow by walking longer: no rollout that does not stop on the goal, however many
chunks it plays, earns as much as the expert (the summed per-chunk TDR, which GRPO exploited by
walking on, fails this).
"""

from __future__ import annotations

import random

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.embodied.house import ACTIONS, FORWARD, LEFT, RIGHT, STOP
from agentic_rl.envs.embodied.navigation import NavigationEnv, make_vln_tasks
from agentic_rl.envs.from_config import env_kwargs
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build
from agentic_rl.train.stages import stage_configs
from agentic_rl.types import Action

SMOKE = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def test_stages_are_sft_then_grpo(tmp_path):
    cfg = load_config("vln_r1", [f"trainer.out_dir={tmp_path}"])
    sft, rl = stage_configs(cfg)
    assert sft.warm_start.num_tasks > 0 and sft.trainer.steps == 0
    assert rl.warm_start.num_tasks == 0 and rl.trainer.steps > 0
    assert rl.algo.name == "grpo" and rl.rollout.group_size == 8  # VLN-R1: GRPO, 8 samples
    assert rl.model.name == str(tmp_path / "vln_r1" / "sft" / "model")
    assert cfg.env.options["chunk_size"] == 6 and 0 < cfg.env.options["decay"] < 1


def test_smoke_runs_sft_then_rl(tmp_path, scripted):
    # every other episode of a group plays the expert (episode indices keep counting across
    # the stages), the others stop at once
    scripted(lambda ep, i, turn: ep.env.expert_turn() if i % 2 == 0 else "<action>stop</action>")
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=vln"]
    assert main(["train", "vln_r1", *SMOKE, *out, "--smoke"]) == 0
    sft = read_metrics(tmp_path / "vln" / "sft" / "metrics.jsonl")
    assert any("warm_start/episodes" in r for r in sft)
    rl = [r for r in read_metrics(tmp_path / "vln" / "rl" / "metrics.jsonl") if "train/reward" in r]
    assert len(rl) == 2 and all(r["train/success"] == 0.5 for r in rl)  # expert vs stop


def one_mistake(position: int):
    """The expert's chunk with the action at `position` swapped for a wrong turn."""

    def script(ep, index, turn):
        chunk = ep.env.expert_actions()[:6]
        if turn == 0 and position < len(chunk):
            chunk[position] = LEFT if chunk[position] != LEFT else RIGHT
            chunk = chunk[: chunk.index(STOP) + 1] if STOP in chunk else chunk
        return "<action>" + " || ".join(ACTIONS[a] for a in chunk) + "</action>"

    return script


def first_turn_rewards(decay: float, position: int, scripted) -> tuple[list[float], list[int]]:
    cfg = load_config("vln_r1", [*SMOKE, f"env.options.decay={decay}"], smoke=True)
    setup = build(cfg)
    tasks = [t for t in setup.train_tasks if len(t.answers[0].split()) > 6][:4]
    episodes = play(setup, tasks, ["a", "b", "c", "d"], scripted(one_mistake(position)), seed=0)
    rewards = [e[0].step_rewards[0] for e in episodes]
    executed = [len(e[0].completion_text.split("</action>")[0].split("||")) for e in episodes]
    return rewards, executed


def test_chunks_of_six_executed_and_the_decay_weighs_near_actions_more(scripted):
    near, executed = first_turn_rewards(0.8, 0, scripted)
    far, _ = first_turn_rewards(0.8, 5, scripted)
    assert executed == [6, 6, 6, 6]  # a turn is a chunk of 6 actions
    full = sum(0.8**j for j in range(6))
    # the chunk's TDR as a share of the expert's, over the route's 2 chunks (these routes take
    # 7-12 actions; the recipe's episode_reward: route_mean)
    assert near == [pytest.approx((full - 1.0) / full / 2)] * 4  # the first action was wrong
    assert far == [pytest.approx((full - 0.8**5) / full / 2)] * 4  # the sixth action was wrong
    # without the decay a near and a far mistake score the same
    flat_near, _ = first_turn_rewards(1.0, 0, scripted)
    flat_far, _ = first_turn_rewards(1.0, 5, scripted)
    assert flat_near == flat_far == [pytest.approx(5.0 / 6.0 / 2)] * 4


def chunk(actions: list[int]) -> Action:
    return Action(
        kind="tool", name="action", arguments={"actions": " || ".join(ACTIONS[a] for a in actions)}
    )


def episode_return(env: NavigationEnv, task, policy, turns: int) -> tuple[float, bool]:
    """(sum of the turn rewards, success) of `policy(env, turn) -> actions` over `turns` turns."""
    env.reset(task, 0)
    total, success = 0.0, False
    for turn in range(turns):
        if env.done:
            break
        result = env.step(chunk(policy(env, turn)))
        total += result.reward
        success = bool(result.info.get("success", 0.0))
    return total, success


def never_stop(actions: list[int]) -> list[int]:
    """`actions` with `stop` replaced by a turn and padded with forwards to 6."""
    out = [LEFT if a == STOP else a for a in actions]
    return (out + [FORWARD] * 6)[:6]


def walkers(seed: int):
    """Policies that play every turn without stopping: random chunks, the expert's path
    without its stop, and a detour away from the goal before following the expert's path (each
    further chunk then matches the re-planned path: what the summed TDR paid for)."""
    rng = random.Random(seed)
    return {
        "random": lambda env, turn: [rng.choice((FORWARD, LEFT, RIGHT)) for _ in range(6)],
        "expert_without_stop": lambda env, turn: never_stop(env.expert_actions()[:6]),
        "detour_then_expert": lambda env, turn: (
            [LEFT, LEFT, FORWARD, FORWARD, FORWARD, FORWARD]
            if turn == 0
            else never_stop(env.expert_actions()[:6])
        ),
    }


def best_walker_margin(options: dict, turns: int) -> float:
    """The most any non-stopping rollout earns over the expert's return, over 30 training
    episodes (15 whose expert path fits one chunk, 15 that need two)."""
    tasks = make_vln_tasks("train", 80, seed=0)
    short = [t for t in tasks if len(t.answers[0].split()) <= 6][:15]
    long = [t for t in tasks if len(t.answers[0].split()) > 6][:15]
    margin = -float("inf")
    for i, task in enumerate(short + long):
        env = NavigationEnv(**options)
        expert, success = episode_return(
            env, task, lambda env, turn: env.expert_actions()[:6], turns
        )
        assert success
        for policy in walkers(i).values():
            walked, walked_success = episode_return(env, task, policy, turns)
            assert not walked_success
            margin = max(margin, walked - expert)
    return margin


def test_stopping_after_a_good_first_chunk_earns_less_than_the_route():
    # the recipe's reward (route_mean): the expert's first chunk of a two-chunk route, then a
    # stop short of the goal, earns half of the expert's chunk share; the mean over the chunks
    # played (episode_reward=mean) paid it in full, which GRPO learned to exploit
    cfg = load_config("vln_r1")
    options = env_kwargs(cfg)
    assert options["episode_reward"] == "route_mean"
    task = next(t for t in make_vln_tasks("train", 40, seed=0) if len(t.answers[0].split()) > 7)

    def stop_after_one_chunk(env, turn):
        return [*env.expert_actions()[:5], STOP]

    def expert(env, turn):
        return env.expert_actions()[:6]

    early, early_success = episode_return(NavigationEnv(**options), task, stop_after_one_chunk, 4)
    full, full_success = episode_return(NavigationEnv(**options), task, expert, 4)
    assert not early_success and full_success
    share = sum(0.8**j for j in range(5)) / sum(0.8**j for j in range(6))
    assert early == pytest.approx(share / 2) and full == pytest.approx(1.0 + 1.0)
    mean = {**options, "episode_reward": "mean"}
    early_mean, _ = episode_return(NavigationEnv(**mean), task, stop_after_one_chunk, 4)
    assert early_mean == pytest.approx(share)


def test_walking_longer_without_stopping_never_earns_more_than_the_expert():
    cfg = load_config("vln_r1")
    options = env_kwargs(cfg)  # the env as the recipe builds it
    # the recipe's reward: every non-stopping rollout earns less than the expert's episode
    assert best_walker_margin(options, cfg.rollout.max_turns) < 0
    # the summed per-chunk TDR without a success reward (what GRPO exploited): walking on pays
    summed = {**options, "episode_reward": "sum", "success_reward": 0.0}
    assert best_walker_margin(summed, cfg.rollout.max_turns) > 0

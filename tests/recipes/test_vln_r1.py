"""The `vln_r1` recipe: SFT on the shortest-path expert, then GRPO, on route instructions in a
generated house, 6-action chunks, VLN-R1's time-decayed reward.

Mechanisms checked: the two stages run in order (SFT then RL from its weights); a model turn
is a chunk of 6 actions, parsed and executed in order; each chunk is rewarded with the decayed
match against the expert's next actions, so moving a mistake from the last position to the
first lowers the reward, and removing the decay (gamma = 1) makes the two equal.
"""

from __future__ import annotations

import pytest

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.embodied.navigation import ACTIONS, LEFT, RIGHT, STOP
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build
from agentic_rl.train.stages import stage_configs

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
    assert near == [pytest.approx(full - 1.0)] * 4  # the first action was wrong
    assert far == [pytest.approx(full - 0.8**5)] * 4  # the sixth action was wrong
    # without the decay a near and a far mistake score the same
    flat_near, _ = first_turn_rewards(1.0, 0, scripted)
    flat_far, _ = first_turn_rewards(1.0, 5, scripted)
    assert flat_near == flat_far == [pytest.approx(5.0)] * 4

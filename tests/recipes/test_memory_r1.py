"""The `memory_r1` recipe: an RL memory manager rewarded by a frozen answer agent's EM.

Mechanism checked: the manager's operations are applied to the bank - a manager that UPDATEs
stale memories earns the answer agent's full EM where one that only ADDs does not, and the
reward of the dialogue reaches every fact's conversation (one training row each) through the
episode's group advantage.
"""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def expert_vs_adder(first: list[str]):
    """Sample 0 of the first group manages like the scripted expert; the others ADD every
    fact verbatim (or, in other groups, write nothing valid)."""

    def script(ep, index, turn):
        if not first:
            first.append(ep.group_id)
        if ep.group_id != first[0]:
            return "ok"
        if index == 0:
            return ep.env.expert_turn()
        return json.dumps({"event": "ADD", "text": ep.env._fact()["text"]})

    return script


def test_memory_r1_smoke(tmp_path, scripted):
    scripted(expert_vs_adder([]))
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=memory_r1"]
    assert main(["train", "memory_r1", *SMOKE, *out, "--smoke"]) == 0
    rows = [
        r for r in read_metrics(tmp_path / "memory_r1" / "metrics.jsonl") if "train/reward" in r
    ]
    assert len(rows) == 2 and rows[0]["train/invalid_actions_per_episode"] > 0


def test_memory_r1_operations_are_applied_and_rewarded(scripted):
    cfg = load_config("memory_r1", SMOKE, smoke=True)
    assert cfg.rollout.mode == "memory" and cfg.algo.name == "grpo"
    setup = build(cfg)
    first: list[str] = []
    scripted(expert_vs_adder(first))
    kept, _, _ = collect(setup, 1)
    group = [ep for ep in kept.samples if ep[0].group_id == first[0]]
    expert, adder = group
    assert expert[0].reward == 1.0  # its UPDATEs / DELETEs reached the bank
    assert adder[0].reward < 1.0  # the same facts, only ADDed: stale memories answer
    facts = len(kept.tasks[kept.samples.index(expert)].fields["facts"])
    assert len(expert) == expert[0].metrics["conversations"] == facts  # one per fact
    batch = prepare_batch(setup, kept)
    for r, e in enumerate(batch.episode_index.tolist()):
        values = batch.advantages[r][batch.loss_mask[r] > 0]
        if kept.samples[e] is expert:
            assert torch.all(values > 0)  # every fact's conversation shares the reward
        elif kept.samples[e] is adder:
            assert torch.all(values < 0)
        else:  # an all-invalid group: no signal
            assert values.abs().max().item() == pytest.approx(0.0)

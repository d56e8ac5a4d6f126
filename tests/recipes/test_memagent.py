"""The `memagent` recipe: MemAgent's multi-conversation reading trained with the
multi-conversation advantage.

Mechanism checked: an episode is several conversations, each its own row of the training batch
(token-native: its prompt masked out, its reply trained), and every row of an episode carries
the group advantage of that episode's final answer - the memory updates are credited with the
answer they led to.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def first_sample_reads_well(first: list[str]):
    """Sample 0 of the first group plays the scripted reader; everything else writes an empty
    memory and answers wrongly."""

    def script(ep, index, turn):
        if not first:
            first.append(ep.group_id)
        if ep.group_id == first[0] and index == 0:
            return ep.env.expert_turn().replace("<|im_end|>", "")
        return "<answer>nobody</answer>" if ep.env.kind == "final" else "nothing"

    return script


def test_memagent_smoke(tmp_path, scripted):
    scripted(first_sample_reads_well([]))
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=memagent"]
    assert main(["train", "memagent", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "memagent" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
    # 2 groups x 2 samples, each 1 + ceil(384 / 128) conversations
    assert rows[0]["train/samples"] > 4


def test_memagent_multi_conversation_advantage(scripted):
    cfg = load_config("memagent", SMOKE, smoke=True)
    assert cfg.rollout.mode == "memory" and cfg.algo.name == "dr_grpo"
    setup = build(cfg)
    first: list[str] = []
    scripted(first_sample_reads_well(first))
    kept, _, _ = collect(setup, 1)
    batch = prepare_batch(setup, kept)
    rows = [s for ep in kept.samples for s in ep]
    assert len(batch) == len(rows) > len(kept.samples)  # one row per conversation
    winner = next(i for i, ep in enumerate(kept.samples) if ep[0].reward == 1.0)
    assert [ep[0].reward for ep in kept.samples].count(1.0) == 1
    per_row = []
    for r, ep in enumerate(batch.episode_index.tolist()):
        mask = batch.loss_mask[r] > 0
        assert mask.any()
        values = batch.advantages[r][mask]
        assert torch.allclose(values, values[0])
        per_row.append((ep, float(values[0])))
    # dr_grpo: r - mean(group) = 1 - 1/2 for the reader, its every conversation included
    mine = [a for ep, a in per_row if ep == winner]
    assert len(mine) > 1 and mine == [pytest.approx(0.5)] * len(mine)
    partner = [a for ep, a in per_row if ep != winner and kept.samples[ep][0].group_id == first[0]]
    assert len(partner) > 1 and partner == [pytest.approx(-0.5)] * len(partner)


def test_memory_mode_needs_a_memory_env():
    with pytest.raises(ConfigError, match="memory-reading or conversation env"):
        load_config("memagent", [*SMOKE, "env.name=calculator", "env.options={}"], smoke=True)

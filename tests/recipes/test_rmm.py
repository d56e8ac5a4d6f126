"""The `rmm` recipe: the policy answers from reranked memories and cites them; the reranker
learns online from those citations (RMM's retrospective reflection).

Mechanism checked: a training step's episodes update the shared reranker once per episode, and
its scores move (tests/envs/test_rmm_env.py checks that the cited memory rises).
"""

from __future__ import annotations

import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.envs.memory.rmm import shared_world
from agentic_rl.logging import read_metrics
from agentic_rl.train.collect import collect
from agentic_rl.train.setup import build

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def cite_first(ep, index, turn):
    return "<cite>1</cite><answer>x</answer>"


def test_rmm_smoke(tmp_path, scripted):
    scripted(lambda ep, index, turn: ep.env.expert_turn())
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=rmm"]
    assert main(["train", "rmm", *SMOKE, *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "rmm" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2


def test_rmm_citations_train_the_reranker(scripted):
    cfg = load_config("rmm", SMOKE, smoke=True)
    world = shared_world(20, 0, cfg.env.options["merge_threshold"])
    world.reset_reranker()
    setup = build(cfg)
    scripted(cite_first)
    task = setup.train_tasks[0]
    q, retrieved = world.retrieve(task.prompt)
    before = world.reranker.scores(q, world.vectors[retrieved]).detach()
    kept, generated, _ = collect(setup, 1)
    assert world.reranker.updates == len(generated.samples)  # one update per episode
    after = world.reranker.scores(q, world.vectors[retrieved]).detach()
    assert not torch.allclose(before, after)

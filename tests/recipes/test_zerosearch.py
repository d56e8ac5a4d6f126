"""The `zerosearch` recipe: an LLM simulates the search engine in training, with the noise
curriculum following the run's progress; evaluation searches a real engine (BM25).

Mechanism checked through the trainer: every training batch's envs answer searches with the
simulated engine at p_noisy = (4^f - 1) / 3 * 0.5 for f = (step - 1) / steps, by hand; the
searches reach the simulator (one batched call per turn) and the share of noisy answers is what
the curriculum draws; evaluation and expert demos use BM25.
"""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.from_config import make_envs
from agentic_rl.envs.search import zerosearch as zs
from agentic_rl.logging import read_metrics
from agentic_rl.retrieval.simulated import SimulatedSearchTool
from agentic_rl.tools.search import BM25Search
from agentic_rl.train import collect
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Completion

# the smoke run skips the evaluation before training: the shared CPU is the bottleneck
LIGHT = ["trainer.eval_before=false"]
SMOKE = ["model.name=tiny", "trainer.progress=false", "env.options.simulator_model=tiny"]


def test_zerosearch_smoke(tmp_path):
    zs.shared_engine.cache_clear()
    cfg = load_config("zerosearch", [*SMOKE, *LIGHT, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.env.name == "zerosearch_qa" and cfg.env.options["reward"] == "f1"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2 and "after" in summary
    rows = read_metrics(tmp_path / "zerosearch" / "metrics.jsonl")
    assert sum("train/reward" in r for r in rows) == 2
    assert any("warm_start/last_loss" in r for r in rows)
    zs.shared_engine.cache_clear()


class KindEcho:
    """Simulator stand-in: writes 'useful' or 'noisy' documents as its prompt asks."""

    def __init__(self, tokenizer):
        self.tokenizer, self.batches = tokenizer, []

    def generate(self, prompts, params):
        self.batches.append(len(prompts))
        kinds = [
            "useful" if "Useful Output" in self.tokenizer.decode(p) else "noisy" for p in prompts
        ]
        docs = "Doc 1: a {} document for the search query here.\nDoc 2: more {} text for it here."
        return [Completion([1], [0.0], "eos", text=docs.format(k, k)) for k in kinds]


def test_the_noise_curriculum_follows_training_progress(tmp_path, monkeypatch, scripted, tokenizer):
    simulator = KindEcho(tokenizer)
    monkeypatch.setattr(zs, "load_simulator", lambda name: (simulator, tokenizer))
    zs.shared_engine.cache_clear()
    built = []  # (progress, envs) of every make_envs call of the run
    real_make_envs = make_envs

    def spy(cfg, n, progress=None, *args, **kwargs):
        envs = real_make_envs(cfg, n, progress, *args, **kwargs)
        built.append((progress, envs))
        return envs

    monkeypatch.setattr(collect, "make_envs", spy)
    # the policy searches the question's person four times (distinct queries), then answers
    scripted(lambda ep, i, t: f"<search>{ep.task.fields['entity']} {i} {t}</search>")
    overrides = ["trainer.steps=3", "warm_start.num_tasks=0", "rollout.group_size=4"]
    cfg = load_config("zerosearch", [*SMOKE, *overrides, f"trainer.out_dir={tmp_path}"], smoke=True)
    train_recipe(cfg)

    training = [(p, envs) for p, envs in built if p is not None]
    # f = (step - 1) / 3 -> p = (4^f - 1) / 3 * 0.5: 0, (4^(1/3) - 1) / 6, (4^(2/3) - 1) / 6
    expected = [0.0, (4 ** (1 / 3) - 1) / 6, (4 ** (2 / 3) - 1) / 6]
    assert [p for p, _ in training] == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert [envs[0].p_noisy for _, envs in training] == pytest.approx(expected)
    for _, envs in training:
        assert all(isinstance(env.tools[0], SimulatedSearchTool) for env in envs)
        assert all(env.tools[0].p_noisy == envs[0].p_noisy for env in envs)
    others = [envs for p, envs in built if p is None]  # evaluation: the real engine
    assert others and all(isinstance(env.tools[0], BM25Search) for envs in others for env in envs)
    # 3 steps x 2 tasks x 4 samples x 4 turns of searches
    engine = training[0][1][0].tools[0].engine
    assert engine.counts["useful"] + engine.counts["noisy"] == 3 * 2 * 4 * 4
    # at most one generate call per turn for the turn's 8 searches; repeats come from the cache
    assert len(simulator.batches) <= 3 * 4 and max(simulator.batches) == 8
    assert sum(simulator.batches) + engine.counts["cache_hits"] == 3 * 2 * 4 * 4

    # step 1 draws no noisy answer (p = 0); the later ones do (p = 0.098 and 0.253, 32 draws
    # each: all useful would have probability 0.902^32 x 0.747^32 < 1e-5)
    def noisy_share(envs):
        docs = [o.content for env in envs for _, o in env.history if o is not None]
        return sum("noisy document" in d for d in docs) / len(docs)

    assert noisy_share(training[0][1]) == 0.0
    assert noisy_share(training[1][1]) + noisy_share(training[2][1]) > 0.0
    zs.shared_engine.cache_clear()

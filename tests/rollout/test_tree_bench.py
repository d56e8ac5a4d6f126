"""bench/tree_rollouts.py: every arm is a valid config of the recipe (the entropy arm ARPO's
branching with half the group as initial episodes), and (slow) the --smoke run on the tiny
model, resumable."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentic_rl.config.load import load_config

SPEC = importlib.util.spec_from_file_location(
    "tree_rollouts", Path(__file__).resolve().parents[2] / "bench" / "tree_rollouts.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


@pytest.mark.parametrize("smoke", [False, True])
def test_every_arm_loads_with_the_recipe(smoke):
    for arm, overrides in bench.ARMS.items():
        cfg = load_config("search_qa_grpo", [*(bench.SMOKE if smoke else []), *overrides])
        assert cfg.rollout.group_size == 8, arm
        tree = cfg.rollout.tree
        assert (tree.roots > 0) == (arm != "grpo")
        assert (tree.branch == "entropy") == (arm == "arpo")
    arpo = load_config("search_qa_grpo", bench.ARMS["arpo"])
    assert (arpo.rollout.tree.roots, arpo.algo.name) == (4, "grpo")
    assert arpo.rollout.tree.entropy_weight == 0.2 and arpo.rollout.tree.branch_threshold == 0.5


@pytest.mark.slow
def test_the_smoke_bench_runs_the_entropy_arm_on_the_tiny_model(tmp_path):
    out = tmp_path / "tree_rollouts.json"
    argv = ["--smoke", "--arms", "grpo", "arpo", "--out", str(out)]
    results = bench.main(argv)
    assert json.loads(out.read_text())["results"] == results
    for arm in ("grpo", "arpo"):
        (step,) = results[arm]["0"]["train"]
        # 2 tasks x 8 episodes of at most 2 turns x 8 tokens
        assert 0 < step["decoded_tokens"] <= 2 * 8 * 2 * 8
        assert 1 <= step["distinct_trajectories"] <= 16
        assert step["reused_prompt_tokens"] > 0  # second turns continue their first's KV
        assert [e["split"] for e in results[arm]["0"]["eval"]][-1] == "eval"
    summary = json.loads(out.read_text())["summary"]  # what the docs page shows, per arm
    assert summary["grpo"]["seeds"] == 1
    assert summary["grpo"]["decoded_per_step"] == results["grpo"]["0"]["train"][0]["decoded_tokens"]
    assert bench.main(argv) == results  # resumed: nothing left to run
    assert "| arpo |" in bench.table(results)

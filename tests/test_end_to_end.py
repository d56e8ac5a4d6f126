"""End-to-end runs with the real bundled model (slow, still run in CI)."""

import json

import pytest

from agentic_rl.cli import main


@pytest.mark.slow
def test_default_recipe_smoke_with_the_bundled_model(tmp_path):
    code = main(
        [
            "train",
            "--smoke",
            f"trainer.out_dir={tmp_path}",
            "trainer.run_name=e2e",
            "trainer.progress=false",
            # One checkpoint (the final one) instead of two: the bundled model's weights and
            # Adam state take 1.6 GB on disk, and CI machines may be short of space.
            "trainer.save_every=2",
        ]
    )
    assert code == 0
    summary = json.loads((tmp_path / "e2e" / "summary.json").read_text())
    assert summary["model"] == "smollm2-135m"
    # The tiny warm start (8 expert episodes) already teaches the tag protocol: the agent calls
    # the search tool instead of writing prose, which the untrained model never does.
    assert (
        summary["before"]["tool_calls_per_episode"]
        < summary["warm_start"]["tool_calls_per_episode"]
    )
    assert code == main(
        ["eval", "search_qa_grpo", "env.num_eval_tasks=4", "--checkpoint", str(tmp_path / "e2e")]
    )

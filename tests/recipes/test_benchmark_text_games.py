"""The ScienceWorld and TextWorldExpress recipes (`scienceworld`, `textworld_express`) run end
to end on a tiny model: the gold-path warm start, GiGPO steps whose start state is shared by the
group, and evaluations that report the benchmark's own score (`env/score`): the expert episodes
score the full 100 / 1, the others 0.

Skipped, saying why, where a benchmark's package or a Java runtime is missing. The JVMs the runs
started are closed after the module."""

from __future__ import annotations

import json
import shutil

import pytest

from agentic_rl.cli import main
from agentic_rl.envs.benchmarks import jvm
from agentic_rl.logging import read_metrics

if shutil.which("java") is None:
    pytest.skip(
        "needs a Java runtime (apt-get install default-jre-headless)", allow_module_level=True
    )

SMOKE = ["model.name=tiny", "trainer.progress=false"]
SMALL = ["env.num_train_tasks=2", "env.num_eval_tasks=2", "warm_start.num_tasks=2"]
# groups of 2 (the expert and one that gives up at the shared start state): a short run
GROUPS = ["rollout.group_size=2"]
FULL = {"scienceworld": 100.0, "textworld_express": 1.0}


@pytest.fixture(scope="module", autouse=True)
def one_jvm():
    yield
    jvm.close_jvms()


def expert_or_give_up(ep, index, turn):
    """Evaluation episodes and episode 0 of each training group play the gold path; the other
    training episodes give up at once (an answer ends the episode with reward 0) from the
    group's shared start state."""
    if ep.group_id.startswith("eval:") or index == 0:
        return ep.env.expert_turn()
    return "<answer>give up</answer>"


@pytest.mark.parametrize("recipe", ["scienceworld", "textworld_express"])
def test_smoke_warm_start_gigpo_and_the_benchmarks_score(
    recipe, tmp_path, scripted, warm_start_episodes
):
    pytest.importorskip(recipe)
    scripted(expert_or_give_up)
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run"]
    assert main(["train", recipe, *SMOKE, *SMALL, *GROUPS, *out, "--smoke"]) == 0
    run = tmp_path / "run"
    assert warm_start_episodes(run) > 0
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "train/reward" in r]
    assert rows and all(r["train/samples"] > r["train/episodes"] for r in rows)  # step-wise
    assert all(r["train/shared_step_groups"] > 0 for r in rows)  # the shared start state
    summary = json.loads((run / "summary.json").read_text())
    for stage in ("before", "warm_start", "after"):
        # every eval episode plays the gold path: the benchmark's full score, success 1
        assert summary[stage]["env/score"] == pytest.approx(FULL[recipe]), stage
        assert summary[stage]["success"] == 1.0, stage

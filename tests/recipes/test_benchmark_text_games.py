"""The ScienceWorld and TextWorldExpress recipes (`scienceworld`, `textworld_express`) run end
to end on a tiny model: the gold-path warm start, GiGPO steps whose start state is shared by the
group, and evaluations that report the benchmark's own score (`env/score`): the expert episodes
score the full 100 / 1, the others 0.

Skipped, saying why, where a benchmark's package or a Java runtime is missing. The JVMs the runs
started are closed after the module."""

from __future__ import annotations

import shutil

import pytest

from agentic_rl.envs.benchmarks import jvm

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


@pytest.mark.parametrize("recipe", ["scienceworld", "textworld_express"])
def test_smoke_warm_start_gigpo_and_the_benchmarks_score(recipe, expert_or_give_up_run):
    pytest.importorskip(recipe)
    summary = expert_or_give_up_run(recipe, [*SMOKE, *SMALL, *GROUPS])
    for stage in ("before", "warm_start", "after"):
        # every eval episode plays the gold path: the benchmark's full score, success 1
        assert summary[stage]["env/score"] == pytest.approx(FULL[recipe]), stage
        assert summary[stage]["success"] == 1.0, stage

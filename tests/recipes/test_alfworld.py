"""The `alfworld` recipe runs end to end on a tiny model over the small data folder the tests
write in ALFWorld's official layout (tests/alfworld_fixture.py; never the real game files): the
walkthrough warm start, GiGPO steps whose start state is shared by the group, and evaluations on
valid_unseen reporting the success rate overall and per task type. Without data it stops before
any model loads, with one line naming the setting.

Skipped, saying why, where TextWorld's PDDL engine (fast-downward-textworld) is missing."""

from __future__ import annotations

import pytest
from alfworld_fixture import write_alfworld_data

from agentic_rl.cli import main

pytest.importorskip("fast_downward", reason="needs TextWorld's PDDL engine (fast-downward)")

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# the fixture's 2 train games and valid_unseen's 1 game; groups of 2 (the expert and one that
# gives up at the shared start state)
SMALL = [
    "env.num_train_tasks=2",
    "env.num_eval_tasks=1",
    "warm_start.num_tasks=2",
    "rollout.group_size=2",
]


@pytest.fixture(autouse=True)
def no_alfworld_data_variable(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)


def test_smoke_warm_start_gigpo_and_the_success_rate_per_task_type(tmp_path, expert_or_give_up_run):
    data = write_alfworld_data(tmp_path / "data")
    summary = expert_or_give_up_run("alfworld", [*SMOKE, *SMALL, f"env.options.data_dir={data}"])
    for stage in ("before", "warm_start", "after"):
        # the valid_unseen game is played by its walkthrough: success, in its task type too
        assert summary[stage]["env/score"] == 1.0, stage
        assert summary[stage]["env/success@pick_heat_then_place_in_recep"] == 1.0, stage
        assert summary[stage]["success"] == 1.0, stage


def test_without_data_the_run_stops_before_the_model_loads(tmp_path, capsys):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run"]
    assert main(["train", "alfworld", *SMOKE, *out, "--smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: env alfworld reads ALFWorld's own game files")
    assert "env.options.data_dir=DIR" in err and "\n" not in err
    missing = tmp_path / "missing"
    assert main(["train", "alfworld", *SMOKE, *out, f"env.options.data_dir={missing}"]) == 2
    assert f"ALFWorld data folder {missing} (env.options.data_dir) does not exist" in (
        capsys.readouterr().err
    )

"""The `webshop_official` recipe runs end to end on a tiny model over the small data folder the
tests write in WebShop's official layout (tests/webshop_fixture.py; never the real data): the
expert warm start, GiGPO steps whose start state is shared by the group, and evaluations on
WebShop's test split reporting its score x 100. Without data it stops before any model loads,
with one line naming the setting."""

from __future__ import annotations

import pytest
from webshop_fixture import write_webshop_data

from agentic_rl.cli import main

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# the fixture's 12 goals as 4 test, 2 dev and 6 train goals; groups of 2 (the expert and one
# that gives up at the shared start state)
SMALL = [
    "env.options.test_goals=4",
    "env.options.dev_goals=2",
    "env.num_train_tasks=4",
    "env.num_eval_tasks=4",
    "warm_start.num_tasks=4",
    "rollout.group_size=2",
]


@pytest.fixture(autouse=True)
def no_webshop_data_variable(monkeypatch):
    monkeypatch.delenv("WEBSHOP_DATA", raising=False)


def test_smoke_warm_start_gigpo_and_webshops_score(tmp_path, expert_or_give_up_run):
    data = write_webshop_data(tmp_path / "data")
    summary = expert_or_give_up_run(
        "webshop_official", [*SMOKE, *SMALL, f"env.options.data_dir={data}"]
    )
    for stage in ("before", "warm_start", "after"):
        # the test goals are bought as instructed by the expert: score 100, success 1
        assert summary[stage]["env/score"] == pytest.approx(100.0), stage
        assert summary[stage]["success"] == 1.0, stage


def test_without_data_the_run_stops_before_the_model_loads(tmp_path, capsys):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=run"]
    assert main(["train", "webshop_official", *SMOKE, *out, "--smoke"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: env webshop_official reads WebShop's own products")
    assert "env.options.data_dir=DIR" in err and "\n" not in err

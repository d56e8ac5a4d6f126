"""The trajectory explorer shows a multi-agent episode's roles: each role's conversation is its
own sample, labelled with its role in the list and the detail, filterable by role, and the
opened sample lists its episode's conversations in the order the roles wrote them."""

from __future__ import annotations

import pytest
from test_report_browser import console_errors, driver, open_page, scroll_to  # noqa: F401

from agentic_rl.config.load import load_config
from agentic_rl.model.tokens import encode_text
from agentic_rl.report.html import write_report
from agentic_rl.train import collect
from agentic_rl.train.loop import train
from agentic_rl.train.trajectory_log import read_trajectories
from agentic_rl.types import Completion

pytestmark = pytest.mark.browser


def team_actor(tokenizer):
    """Every episode plays the env's scripted team (the tiny random model would rarely reach
    the verifier): a calculation, an answer, the verifier's calculation and verdict."""

    def act(episodes, budgets, turn):
        out = []
        for ep in episodes:
            text = ep.env.expert_turn()
            ids = encode_text(tokenizer, text)
            out.append(Completion(ids, [-1.0] * len(ids), "stop", text))
        return out

    return act


@pytest.fixture(scope="module")
def team_run(tmp_path_factory, tokenizer):
    out = tmp_path_factory.mktemp("team_run")
    cfg = load_config(
        "solver_verifier",
        [
            "model.name=tiny",
            "trainer.progress=false",
            "trainer.tensorboard=false",
            "trainer.steps=1",
            f"trainer.out_dir={out}",
            "trainer.run_name=team",
        ],
        smoke=True,
    )
    actor = team_actor(tokenizer)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(collect, "policy_actor", lambda *args, **kwargs: actor)
        train(cfg)
    return out / "team"


def test_trajectory_records_name_their_role(team_run):
    records = list(read_trajectories(team_run / "trajectories.jsonl.gz"))
    train_records = [r for r in records if r["split"] == "train"]
    assert {r["role"] for r in train_records} == {"solver", "verifier"}
    first = [r for r in train_records if r["episode"] == train_records[0]["episode"]]
    assert [r["role"] for r in sorted(first, key=lambda r: r["sample"])][:2] == [
        "solver",
        "verifier",
    ]


def test_the_explorer_shows_and_filters_roles(driver, team_run, tmp_path):  # noqa: F811
    open_page(driver, write_report([team_run], tmp_path / "report.html"))
    scroll_to(driver, "sec-trajectories")
    options = [o.text for o in driver.find_elements("css selector", "#f-role option")]
    assert options == ["all", "solver", "verifier"]
    driver.execute_script(
        "const s = document.getElementById('f-role'); s.value = 'verifier';"
        "s.dispatchEvent(new Event('change'));"
    )
    groups = [e.text for e in driver.find_elements("css selector", "#traj-body td.group")]
    assert groups and all(g.endswith("· verifier") for g in groups)
    driver.find_element("css selector", "tr.traj-row").click()
    detail = driver.find_element("id", "detail")
    assert "role verifier" in detail.find_element("css selector", ".head").text
    roles = detail.find_element("css selector", ".roles").text
    assert "solver (" in roles and "→ verifier (" in roles
    assert console_errors(driver) == []

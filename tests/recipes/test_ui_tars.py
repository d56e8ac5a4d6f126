"""The `ui_tars` recipe: learning from failures on MiniWoB++ pages, then GRPO.

Mechanism checked: a failed episode gives one pair, built at its first failing step: chosen and
rejected share the episode's tokens up to that turn exactly, chosen is the scripted expert's
action at that state, rejected is the agent's turn as sampled, and only the action tokens are
trained (loss mask); a successful episode gives none; the failure stage trains DPO on the pairs
and writes them; the three stages (warm start, failure DPO, GRPO) run in order under --smoke.
The browser tests are marked `browser` (skipped, saying why, where no Chromium is installed).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.browser.driver import browser_available
from agentic_rl.envs.from_config import make_envs
from agentic_rl.logging import RunLogger, read_metrics
from agentic_rl.train import collect
from agentic_rl.train.failures import failure_pairs, learn_from_failures
from agentic_rl.train.setup import build
from agentic_rl.train.stages import stage_configs, train_recipe

FAST = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]
STAGES = ["sft", "failure_dpo", "grpo"]

needs_browser = pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)


def test_the_three_stages_are_configured_in_order(tmp_path):
    cfg = load_config("ui_tars", [f"trainer.out_dir={tmp_path}"])
    stages = stage_configs(cfg)
    assert [s.trainer.run_name.split("/")[-1] for s in stages] == STAGES
    assert [s.warm_start.num_tasks > 0 for s in stages] == [True, False, False]
    assert [s.dpo.failure_tasks > 0 for s in stages] == [False, True, False]
    assert [s.trainer.steps > 0 for s in stages] == [False, False, True]
    assert stages[2].algo.name == "grpo" and stages[0].env.name == "miniwob"
    for before, after in zip(stages, stages[1:], strict=False):  # chained weights
        assert after.model.name == str(tmp_path / before.trainer.run_name / "model")


def test_failure_tasks_need_an_expert():
    with pytest.raises(ConfigError, match="dpo.failure_tasks"):
        load_config(
            "ragen_frozenlake",
            [
                "env.name=gym_text",
                "env.options={}",
                "warm_start.num_tasks=0",
                "dpo.failure_tasks=4",
            ],
        )


def enter_text_script(ep, index, turn):
    """Types the right text, then clicks the text field instead of Submit, then gives up; the
    episodes of the last task play the expert (and succeed)."""
    if ep.task.task_id.endswith(LAST) or turn == 0:
        return ep.env.expert_turn()
    if turn == 1:
        box = next(e.ref for e in ep.env.snapshot.elements if e.role == "textbox")
        return f"<action>click({box})</action>"
    return "<answer>stuck</answer>"


LAST = ""  # set by the test: the task id whose episode plays the expert


@pytest.mark.browser
@needs_browser
def test_pairs_are_built_at_the_first_failing_step(scripted, tokenizer, tmp_path):
    global LAST
    cfg = load_config(
        "ui_tars",
        # 3 turns: the right text, the wrong click, then the agent's next action (a recovery)
        [
            *FAST,
            f"trainer.out_dir={tmp_path}",
            "env.options.tasks=enter-text",
            "rollout.max_turns=3",
        ],
        smoke=True,
    )
    setup = build(cfg)
    tasks = setup.train_tasks[:3]
    LAST = tasks[-1].task_id
    groups = [f"failure:{i}:{t.task_id}" for i, t in enumerate(tasks)]
    episodes = [s[0] for s in collect.play(setup, tasks, groups, scripted(enter_text_script), 5)]
    assert [e.metrics["success"] for e in episodes] == [0.0, 0.0, 1.0]

    pairs, counts = failure_pairs(
        episodes, tasks, groups, 5, lambda: make_envs(cfg, 1)[0], setup.fmt, tokenizer
    )
    assert counts["failed"] == 2 and counts["pairs"] == 2 and counts["recovery_pairs"] == 2
    corrections = [p for p in pairs if p.kind == "correction"]
    recoveries = [p for p in pairs if p.kind == "recovery"]
    assert len(corrections) == len(recoveries) == 2
    for pair, trajectory in zip(corrections, episodes, strict=False):
        assert pair.turn == 1  # turn 0 (typing the text) was right; clicking the box was not
        start, end = trajectory.turn_spans[1]
        prefix = trajectory.token_ids[:start]
        # the same state, token for token: prompt, turn 0 and the page after it
        assert pair.chosen.token_ids[:start] == prefix == pair.rejected.token_ids[:start]
        assert pair.rejected.token_ids[start:] == trajectory.token_ids[start:end]
        chosen = tokenizer.decode(pair.chosen.token_ids[start:])
        submit = "<action>click(2)</action>"  # the expert's action there: [2] button "Submit"
        assert chosen == submit and "click(1)" in tokenizer.decode(pair.rejected.token_ids[start:])
        for side in (pair.chosen, pair.rejected):
            assert side.loss_mask == [0] * start + [1] * (len(side.token_ids) - start)
    submit = "<action>click(2)</action>"
    for pair, trajectory in zip(recoveries, episodes, strict=False):
        # the step after the error: the erroneous click sits in the shared prefix, untrained
        assert pair.turn == 2
        start, end = trajectory.turn_spans[2]
        assert pair.chosen.token_ids[:start] == trajectory.token_ids[:start]
        assert pair.rejected.token_ids == trajectory.token_ids[:end]
        assert tokenizer.decode(pair.chosen.token_ids[start:]) == submit  # the recovery
        assert "stuck" in tokenizer.decode(pair.rejected.token_ids[start:])
        for side in (pair.chosen, pair.rejected):
            assert side.loss_mask == [0] * start + [1] * (len(side.token_ids) - start)
    without, counts = failure_pairs(
        episodes, tasks, groups, 5, lambda: make_envs(cfg, 1)[0], setup.fmt, tokenizer, False
    )
    assert [p.kind for p in without] == ["correction"] * 2 and counts["recovery_pairs"] == 0


@pytest.mark.browser
@needs_browser
def test_learning_from_failures_trains_dpo_on_the_pairs(scripted, tmp_path):
    global LAST
    cfg = load_config(
        "ui_tars",
        [
            *FAST,
            f"trainer.out_dir={tmp_path}",
            "env.options.tasks=enter-text",
            "rollout.max_turns=3",
            "*:dpo.failure_tasks=4",  # this test builds the recipe's base config, not a stage
            "dpo.lr=1e-3",
            "dpo.epochs=2",
            "*:warm_start.num_tasks=0",
        ],
        smoke=True,
    )
    setup = build(cfg)
    LAST = "never"
    scripted(enter_text_script)
    before = {k: v.clone() for k, v in setup.policy.state_dict().items()}
    with RunLogger(tmp_path, 0, tensorboard=False, progress=False) as logger:
        metrics = learn_from_failures(setup, logger, tmp_path)
    n = cfg.dpo.failure_tasks  # --smoke makes it 8
    assert metrics["failed"] == n and metrics["pairs"] == n and metrics["steps"] > 0
    assert metrics["recovery_pairs"] == n  # the agent gives up after its error: a recovery pair
    assert metrics["margin"] > 0  # the policy now prefers the corrections
    moved = any(not torch.equal(before[k], v) for k, v in setup.policy.state_dict().items())
    assert moved
    rows = [json.loads(line) for line in (tmp_path / "failure_pairs.jsonl").open()]
    assert len(rows) == 2 * n
    assert [r["turn"] for r in rows if r["kind"] == "correction"] == [1] * n
    assert [r["turn"] for r in rows if r["kind"] == "recovery"] == [2] * n
    assert [r for r in read_metrics(tmp_path / "metrics.jsonl") if "failure_dpo/pairs" in r]


@pytest.mark.browser
@needs_browser
def test_smoke_runs_the_three_stages(tmp_path):
    cfg = load_config("ui_tars", [*FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    summary = train_recipe(cfg)
    assert list(summary["stages"]) == STAGES
    run = tmp_path / "ui_tars"
    assert (run / "failure_dpo" / "failure_pairs.jsonl").exists()
    rows = read_metrics(run / "failure_dpo" / "metrics.jsonl")
    assert any(r.get("failure_dpo/pairs", 0) > 0 for r in rows)

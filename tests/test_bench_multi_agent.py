"""bench/multi_agent.py: the arms' recipes and budget, the table by hand, and a tiny-model smoke
of the whole bench (slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.from_config import make_envs

SPEC = importlib.util.spec_from_file_location(
    "multi_agent", Path(__file__).resolve().parent.parent / "bench" / "multi_agent.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_the_team_and_the_single_agent_get_the_same_token_budget():
    budgets = {}
    for arm in ("planner_executor", "search_single"):
        recipe, overrides = bench.RECIPES[arm]
        full = load_config(recipe, ["model.name=tiny", *overrides])
        cfg = full.rollout
        budgets[arm] = (cfg.tasks_per_step, cfg.group_size, cfg.max_turns * cfg.max_tokens_per_turn)
        # the same 100 held-out questions, both arms in bf16 autocast
        assert full.env.num_eval_tasks == 100, arm
        assert (cfg.mixed_precision, full.learner.mixed_precision) == ("bf16", "bf16"), arm
    assert budgets["planner_executor"] == budgets["search_single"] == (2, 8, 480)
    cfg = load_config(bench.RECIPES["solver_verifier"][0], ["model.name=tiny"])
    assert cfg.model.role_policies == "adapters" and cfg.algo.role_groups
    recipe, overrides = bench.RECIPES["solver_verifier_models"]
    models = load_config(recipe, ["model.name=tiny", *overrides])
    assert models.model.role_policies == "models" and models.model.lora_rank == 0
    assert (models.warm_start.lr, models.optim.lr) == (1e-4, 5e-6)  # full fine-tuning rates


def test_every_arm_builds_its_env_with_its_options():
    for recipe, overrides in bench.RECIPES.values():
        make_envs(load_config(recipe, ["model.name=tiny", *overrides]), 1)
    recipe, overrides = bench.RECIPES["solver_verifier_counterfactual"]
    (env,) = make_envs(load_config(recipe, ["model.name=tiny", *overrides]), 1)
    assert (env.verdict_credit, env.solver_reward) == ("counterfactual", 0.5)
    recipe, overrides = bench.RECIPES["solver_verifier_untrained_guesses"]
    cfg = load_config(recipe, ["model.name=tiny", *overrides])
    (env,) = make_envs(cfg, 1)
    assert (env.expert_mistakes, cfg.warm_start.recovery_fraction) == (0.0, 0.5)


def test_table_by_hand():
    run = {
        "train": [{"decoded_tokens": 300_000.0}, {"decoded_tokens": 200_000.0}],
        "eval": [
            {"success": 0.25, "split": "eval_warm_start"},
            {"success": 0.5, "split": "eval"},
        ],
    }
    other = {
        **run,
        "eval": [{"success": 0.25, "split": "eval_before"}, {"success": 0.75, "split": "eval"}],
    }
    lines = bench.table({"solver_verifier": {"0": run, "1": other}}).splitlines()
    # gains 0.25 and 0.5 over 0.5M decoded tokens each: 0.5 and 1.0 per million
    assert lines[-1] == "| solver_verifier | 2 | 0.625 | 0.375 | 0.750 | 250000.000 |"


def test_team_summary_reads_what_the_verifier_did_at_the_last_evaluation():
    def evaluation(split, env):
        return {"success": 0.5, "split": split, "env": env}

    run = {
        "train": [{"decoded_tokens": 1000.0}],
        "eval": [
            evaluation("eval_warm_start", {"verdicts_on_wrong": 0.5, "wrong_rejected": 0.1}),
            evaluation("eval", {"verdicts_on_wrong": 0.5, "wrong_rejected": 0.1}),
            evaluation(
                "eval",
                {"verdicts_on_wrong": 0.4, "wrong_rejected": 0.3, "right_rejected": 0.2},
            ),
        ],
    }
    summary = bench.team_summary(run)
    assert summary["caught"] == pytest.approx(0.75) and summary["right_rejected"] == 0.2
    # a run that predates the verdict counts, and one whose proposals were all right
    assert "caught" not in bench.team_summary({**run, "eval": run["eval"][:1]})
    older = {"success": 0.5, "split": "eval"}  # recorded before evaluations kept env metrics
    assert "caught" not in bench.team_summary({**run, "eval": [older]})
    all_right = evaluation("eval", {"verdicts_on_wrong": 0.0, "wrong_rejected": 0.0})
    assert bench.team_summary({**run, "eval": [all_right]})["caught"] is None


@pytest.mark.slow
def test_the_bench_runs_on_the_tiny_model_and_resumes(tmp_path):
    out = tmp_path / "multi_agent.json"
    argv = ["--smoke", "--seeds", "0", "--arms", "planner_executor", "solver_verifier"]
    bench.main([*argv, "--out", str(out)])
    record = json.loads(out.read_text())
    assert set(record["results"]) == {"planner_executor", "solver_verifier"}
    run = record["results"]["solver_verifier"]["0"]
    assert run["train"] and run["train"][0]["decoded_tokens"] > 0
    assert any(e["split"] == "eval" for e in run["eval"])
    picture = out.with_suffix(".png")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    picture.unlink()
    bench.main([*argv, "--out", str(out), "--plot"])  # redrawn from the file alone
    assert picture.is_file()
    before = out.read_text()
    bench.main([*argv, "--out", str(out)])  # everything measured: nothing runs again
    assert json.loads(out.read_text())["results"] == json.loads(before)["results"]

"""bench/turn_credit.py: each arm is the recipe with its estimator (critic settings only where a
critic acts), the table by hand, and a tiny-model smoke of the whole bench (slow)."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import yaml

SPEC = importlib.util.spec_from_file_location(
    "turn_credit", Path(__file__).resolve().parent.parent / "bench" / "turn_credit.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def test_every_arm_is_the_recipe_with_its_estimator(tmp_path):
    args = argparse.Namespace(
        recipe="stepsearch", model="tiny", steps=2, tasks_per_step=2, group_size=2,
        eval_tasks=2, warm_tasks=2, smoke=False, overrides=[],
    )  # fmt: skip
    for arm in bench.ARMS:
        cfg = bench.arm_config(args, arm, 1, tmp_path)
        assert cfg.algo.name == bench.ARMS[arm]["name"] and cfg.trainer.seed == 1
        assert cfg.rollout.group_size == 2
        assert cfg.algo.policy_loss == ("turn" if arm == "turn_ppo_turn_ratio" else "ppo")
        outcome = "last_turn" if arm == "mt_grpo_outcome" else "episode"
        assert cfg.algo.mt_grpo_outcome == outcome
        algo = yaml.safe_load(bench.arm_recipe(args, arm, tmp_path).read_text())["algo"]
        assert ("critic" in algo) == (arm in bench.CRITIC_ARMS)
        # the recipe's other settings stay: its loss, clip and KL
        assert cfg.algo.kl_coef == 0.001 and cfg.algo.loss_agg == "token-mean"
        assert cfg.env.options["step_reward_weight"] == 0.6
    assert bench.arm_config(args, "mt_grpo", 0, tmp_path).algo.turn_advantage_coef == 1.0
    assert bench.arm_config(args, "turn_ppo", 0, tmp_path).algo.critic == "separate"


def test_table_by_hand():
    run = {
        "eval_success": 0.5,
        "eval_reward": 0.25,
        "train": [{"reward": 0.0}, {"reward": 1.0, "turn_adv_nonzero": 0.5}, {"reward": 2.0}],
    }
    other = {**run, "eval_success": 0.7}
    text = bench.table({"mt_grpo": {"0": run, "1": other}}, {"success": 0.125})
    lines = text.splitlines()
    assert lines[0] == "warm start (shared): held-out success 0.125"
    # last third of 3 steps = the last step; turn_adv_nonzero from the one step that has it
    assert lines[-1] == (
        "| mt_grpo | 2 | 0.600 [0.500, 0.700] | 0.250 [0.250, 0.250] | 2.000 [2.000, 2.000] "
        "| 0.500 [0.500, 0.500] |"
    )


def test_summary_by_hand(tmp_path):
    data = {
        "results": {
            "grpo": {"0": {"eval_success": 0.5}, "1": {"eval_success": 0.75}},
            "mt_grpo": {"0": {"eval_success": 0.25}},
        }
    }
    bench.save(data, tmp_path / "out.json")
    written = json.loads((tmp_path / "out.json").read_text())
    assert written["summary"] == {
        "grpo": {"seeds": 2, "eval_success": {"mean": 0.625, "min": 0.5, "max": 0.75}},
        "mt_grpo": {"seeds": 1, "eval_success": {"mean": 0.25, "min": 0.25, "max": 0.25}},
    }


def test_a_resume_refuses_a_different_warm_start(tmp_path):
    stored = {"success": 0.63, "reward": 0.8}
    bench.check_same_warm_start(None, stored, tmp_path)  # a new file: nothing to match
    bench.check_same_warm_start(stored, dict(stored), tmp_path)
    with pytest.raises(SystemExit, match="held-out success 0.6300; this one gives 0.6400"):
        bench.check_same_warm_start(stored, {"success": 0.64, "reward": 0.8}, tmp_path)


def test_the_grid_world_arms_keep_its_progress_reward(tmp_path):
    args = argparse.Namespace(
        recipe="mt_grpo_gridworld", model="tiny", steps=2, tasks_per_step=2, group_size=2,
        eval_tasks=2, warm_tasks=2, smoke=False, overrides=[],
    )  # fmt: skip
    for arm in ("grpo", "mt_grpo", "turn_ppo"):
        cfg = bench.arm_config(args, arm, 0, tmp_path)
        assert cfg.algo.name == arm and cfg.rollout.mode == "episode"
        assert cfg.env.options["distance_reward"] == 0.1


@pytest.mark.slow
def test_the_bench_runs_on_the_tiny_model_and_resumes(tmp_path):
    out = tmp_path / "turn_credit.json"
    argv = ["--model", "tiny", "--arms", "mt_grpo", "turn_ppo", "--seeds", "0", "--steps", "1"]
    argv += ["--tasks-per-step", "2", "--group-size", "2", "--eval-tasks", "2", "--smoke"]
    data = bench.main([*argv, "--out", str(out)])
    assert json.loads(out.read_text()) == data
    for arm in ("mt_grpo", "turn_ppo"):
        run = data["results"][arm]["0"]
        assert len(run["train"]) == 1 and 0.0 <= run["eval_success"] <= 1.0
        assert run["optimizer_steps"] == 1.0
    assert data["results"]["turn_ppo"]["0"]["train"][0]["value_loss"] > 0
    assert data["optimizer_steps_per_step"] == 1.0  # stepsearch: one mini-batch
    assert bench.main([*argv, "--out", str(out)]) == data  # nothing left to run
    # a resume with another arm: the warm start is made again and matches; both commands kept
    more = bench.main([*argv[:3], "grpo", *argv[5:], "--out", str(out)])
    assert set(more["results"]) == {"mt_grpo", "turn_ppo", "grpo"}
    assert more["command"] == more["commands"][0] and len(more["commands"]) == 2

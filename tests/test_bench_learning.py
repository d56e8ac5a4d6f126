"""bench/learning.py: the held-out curve, the RL gain over seeds, the family table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import learning  # noqa: E402
from learning import (  # noqa: E402
    FAMILIES,
    eval_curve,
    flat_summary,
    merge_results,
    recipe_stages,
    rl_gain,
    seed_row,
)


def test_eval_curve_reads_the_held_out_evaluations(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    records = [
        {"step": 0, "eval_before/success": 0.0},
        {"step": 0, "eval_warm_start/success": 0.5},  # step 0 of the curve: after the warm start
        {"step": 1, "train/reward": 1.0},
        {"step": 2, "eval/success": 0.75},
        {"step": 4, "eval/success": 1.0},
    ]
    text = "\n".join(json.dumps(r) for r in records) + "\n{cut by a kill"
    (run / "metrics.jsonl").write_text(text)
    assert eval_curve(run, "success") == [[0, 0.5], [2, 0.75], [4, 1.0]]


def test_rl_gain_is_after_rl_minus_the_warm_start() -> None:
    seeds = [
        {"before": 0.0, "warm_start": 0.5, "after_rl": 0.75},
        {"before": 0.0, "warm_start": 0.6, "after_rl": 0.7},
        {"before": 0.1, "warm_start": None, "after_rl": 0.4},  # no warm start: over `before`
    ]
    gain = rl_gain(seeds)
    assert gain["mean"] == pytest.approx((0.25 + 0.1 + 0.3) / 3)
    assert gain["min"] == pytest.approx(0.1) and gain["max"] == pytest.approx(0.3)
    assert rl_gain([]) is None


def _part(seeds: list[tuple[int, float, float]], **settings) -> dict:
    base = {"key": "memory", "recipe": "memagent", "metric": "success", "held_out_tasks": 100,
            "rl_steps": 20, "set": [], "machine": {"cpu": "x"}}  # fmt: skip
    rows = [{"seed": s, "before": 0.0, "warm_start": w, "after_rl": a} for s, w, a in seeds]
    return {**base, **settings, "seeds": rows, "rl_gain": rl_gain(rows)}


def test_seeds_run_side_by_side_merge_into_one_file() -> None:
    merged = merge_results([_part([(2, 0.5, 0.7)]), _part([(0, 0.4, 0.6), (1, 0.5, 0.5)])])
    assert [s["seed"] for s in merged["seeds"]] == [0, 1, 2]
    assert merged["rl_gain"]["mean"] == pytest.approx((0.2 + 0.0 + 0.2) / 3)
    assert merged["recipe"] == "memagent" and merged["machine"] == {"cpu": "x"}
    with pytest.raises(ValueError, match="seed 0 is in two"):
        merge_results([_part([(0, 0.4, 0.6)]), _part([(0, 0.4, 0.6)])])
    with pytest.raises(ValueError, match=r"rl_steps \(20 vs 30\)"):
        merge_results([_part([(0, 0.4, 0.6)]), _part([(1, 0.4, 0.6)], rl_steps=30)])
    with pytest.raises(ValueError, match="nothing"):
        merge_results([])


def test_stopped_runs_merge_beside_the_finished_seeds() -> None:
    stopped = {"seed": 2, "stopped_after_s": 9.0, "rl_steps_done": 3, "curve": [[0, 0.5]]}
    only_stopped = {**_part([]), "held_out_tasks": None, "stopped": [stopped]}
    merged = merge_results([only_stopped, _part([(0, 0.4, 0.6), (1, 0.5, 0.5)])])
    assert [s["seed"] for s in merged["seeds"]] == [0, 1] and merged["stopped"] == [stopped]
    assert merged["held_out_tasks"] == 100 and merged["rl_gain"]["n"] == 2
    finished = merge_results([only_stopped, _part([(2, 0.5, 0.7)])])
    assert "stopped" not in finished  # the seed finished elsewhere: it is not stopped


def _metrics(run_dir: Path, records: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in records]
    (run_dir / "metrics.jsonl").write_text("\n".join([*lines, '{"step": 3, "trai']) + "\n")


def test_a_run_past_its_limit_is_kept_under_stopped_and_replaced_when_it_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--run-limit-s: a killed seed's curve so far goes under "stopped" (its RL steps counted
    from its metrics, a line cut by the kill skipped), outside the seeds and the RL gain; a later
    run of that seed that finishes takes its place."""
    finish = {0}
    limits = []

    def fake_run_one(args, recipe, seed, out, limit_s=None):
        limits.append(limit_s)
        evals = [{"step": 0, "eval_warm_start/success": 0.5}]
        train = [{"step": k, "train/reward": 0.1} for k in (1, 2)]
        _metrics(out / recipe, [*evals, *train, {"step": 2, "eval/success": 0.6}])
        if seed not in finish:
            raise learning.RunStopped(f"{recipe} seed {seed} stopped after {limit_s} s")
        summary = {"before": {"success": 0.0}, "warm_start": {"success": 0.5},
                   "after": {"success": 0.6}, "eval_tasks": 4}  # fmt: skip
        return {"seed": seed, "summary": summary, "rl_steps": 2, "wall_seconds": 1.0,
                "peak_rss_mib": 1.0, "mechanism": {}, "step_metrics": {}}  # fmt: skip

    monkeypatch.setattr(learning, "run_one", fake_run_one)
    argv = ["learning.py", "search", "--results", str(tmp_path), "--seeds", "0", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--run-limit-s", "7"])
    learning.main()
    written = json.loads((tmp_path / "search.json").read_text())
    assert limits == [7.0, 7.0]
    assert [s["seed"] for s in written["seeds"]] == [0] and written["rl_gain"]["n"] == 1
    (stopped,) = written["stopped"]
    assert stopped["seed"] == 1 and stopped["stopped_after_s"] == 7.0
    assert stopped["rl_steps_done"] == 2 and stopped["curve"] == [[0, 0.5], [2, 0.6]]
    finish.add(1)  # run again without a limit: seed 1 finishes, seed 0 is kept
    monkeypatch.setattr(sys, "argv", argv)
    learning.main()
    written = json.loads((tmp_path / "search.json").read_text())
    assert [s["seed"] for s in written["seeds"]] == [0, 1] and "stopped" not in written
    assert limits == [7.0, 7.0, None]


def test_run_one_stops_a_child_at_its_limit(tmp_path: Path) -> None:
    import argparse

    from recipe_runs import RunStopped, run_one

    args = argparse.Namespace(model="tiny", minutes=0, eval_tasks=2, threads=1, set=[])
    with pytest.raises(RunStopped, match="stopped after 0.5 s"):
        run_one(args, "search_qa_grpo", 0, tmp_path, limit_s=0.5)
    assert (tmp_path / "search_qa_grpo-seed0.log").is_file()


def test_every_family_names_a_shipped_recipe() -> None:
    shipped = {p.stem for p in (ROOT / "recipes").glob("*.yaml")}
    for key, family in FAMILIES.items():
        assert family.recipe in shipped, key
        assert 0 < family.eval_every <= family.steps


@pytest.mark.parametrize("key", [k for k, f in FAMILIES.items() if f.overrides])
def test_a_family_calibration_is_a_valid_override_of_its_recipe(key: str) -> None:
    from agentic_rl.config.load import load_config

    family = FAMILIES[key]
    cfg = load_config(family.recipe, list(family.overrides))
    stages = {stage["trainer"]["run_name"].rsplit("/", 1)[-1]: stage for stage in cfg.stages}
    for text in family.overrides:  # each override took effect (a typo'd key would be refused)
        scope, _, setting = text.partition(":") if ":" in text.split("=", 1)[0] else ("", "", text)
        dotted, value = setting.split("=", 1)
        # an unscoped override acts on the recipe and every stage; STAGE:key on that stage only
        targets = [stages[scope]] if scope else [cfg, *stages.values()]
        for node in targets:
            for part in dotted.split("."):
                node = node[part] if isinstance(node, dict) else getattr(node, part)
            # a float field reads "5e-6" (a string to YAML) as the number: compare numbers
            same = node == float(value) if isinstance(node, float) else str(node) == value
            assert same, (text, scope)


def test_a_multi_stage_run_reads_as_its_rl_stage() -> None:
    staged = {
        "recipe": "r",
        "stages": {
            "sft": {
                "before": {"success": 0.0},
                "warm_start": {"success": 0.2},
                "after": {"success": 0.3},
            },
            "rl": {"after": {"success": 0.5}, "eval_tasks": 100},
        },
    }
    flat = flat_summary(staged)
    assert flat["before"] == {"success": 0.0}
    assert flat["warm_start"] == {"success": 0.3}  # where the RL stage starts: SFT's final eval
    assert flat["after"] == {"success": 0.5} and flat["eval_tasks"] == 100
    plain = {"before": {"success": 0.1}, "after": {"success": 0.2}}
    assert flat_summary(plain) is plain


def test_a_multi_stage_recipe_names_its_stages() -> None:
    assert recipe_stages("vln_r1") == ["sft", "rl"]
    assert recipe_stages("search_qa_grpo") == []


def test_a_seed_row_keeps_the_runs_step_metrics_for_diagnosis() -> None:
    run = {
        "seed": 1,
        "rl_steps": 4,
        "wall_seconds": 10.0,
        "peak_rss_mib": 100.0,
        "mechanism": {"success": {"first": 0.5, "last": 0.75}},
        "step_metrics": {"nonzero_adv_fraction": {"first": 0.25, "last": 0.5}},
    }
    summary = {
        "before": {"success": 0.0},
        "warm_start": {"success": 0.5},
        "after": {"success": 0.6},
    }
    row = seed_row(run, summary, [[0, 0.5], [4, 0.6]], "success", "cmd", "abc")
    assert row["step_metrics"] == {"nonzero_adv_fraction": {"first": 0.25, "last": 0.5}}
    assert (row["before"], row["warm_start"], row["after_rl"]) == (0.0, 0.5, 0.6)


@pytest.mark.slow
def test_a_tiny_run_writes_its_seed_row_and_keeps_its_run_where_asked(tmp_path: Path) -> None:
    import os
    import subprocess

    results, runs = tmp_path / "results", tmp_path / "runs"
    argv = [
        sys.executable,
        str(ROOT / "bench" / "learning.py"),
        "search",
        *("--model", "tiny", "--steps", "1", "--eval-every", "1", "--seeds", "0"),
        *("--eval-tasks", "2", "--results", str(results), "--keep-runs", str(runs), "--set"),
        *("warm_start.num_tasks=2", "rollout.tasks_per_step=1", "rollout.group_size=2"),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((results / "search.json").read_text())
    (row,) = written["seeds"]
    assert row["seed"] == 0 and row["rl_steps"] == 1 and written["held_out_tasks"] == 2
    assert [step for step, _ in row["curve"]] == [0, 1]
    kept = runs / "seed-0" / "search_qa_grpo"
    assert (kept / "summary.json").is_file() and any((kept / "checkpoints").iterdir())
    again = subprocess.run([*argv, "--force"], capture_output=True, text=True, env=env)
    assert again.returncode != 0 and "is not empty" in again.stderr  # it would resume, not rerun

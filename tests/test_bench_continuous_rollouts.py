"""bench/continuous_rollouts.py on the tiny model (--smoke): both arms run and are tabled; with
slow steps the continuous schedule's rollout is faster, greedy and seeded sampled tokens agree,
and the continuous schedule prefills no more prompt tokens."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from agentic_rl.types import Action, Observation, StepResult, Task

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # the bench imports its sibling arms.py
SPEC = importlib.util.spec_from_file_location(
    "continuous_rollouts", BENCH / "continuous_rollouts.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


class Counting:
    tools: list = []

    def __init__(self) -> None:
        self.stepped = 0

    def reset(self, task: Task, seed: int) -> Observation:
        return Observation(messages=[{"role": "user", "content": task.prompt}])

    def step(self, action: Action) -> StepResult:
        self.stepped += 1
        return StepResult(None)

    def start_step(self, action: Action):  # hidden by the wrapper: every step sleeps there
        raise AssertionError("Delayed must not pass start_step through")


def test_delays_are_drawn_per_task_seed_and_step_the_same_in_every_schedule(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(bench.time, "sleep", slept.append)
    env = bench.Delayed(Counting(), latency_s=2.0, fraction=0.5)
    env.reset(Task("t", "p"), seed=3)
    for _ in range(20):
        env.step(Action(kind="none"))
    draws = [random.Random(f"t:3:{k}").random() < 0.5 for k in range(1, 21)]
    assert slept == [2.0] * sum(draws) and 0 < len(slept) < 20
    assert env.env.stepped == 20 and not hasattr(env, "start_step")


def test_smoke_runs_both_parts_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "cr.json"
    args = ["--smoke", "--latency-s", "0.3", "--slow-fraction", "0.5", "--out", str(out)]
    record = bench.main(args)
    assert json.loads(out.read_text())["recipe"] == "search_qa_grpo"
    assert set(record["train"]) == {"lockstep", "continuous"}
    for arm in record["train"].values():
        assert arm["0"]["train"] and "step_seconds" in arm["0"]["train"][0]
    part = record["rollout"]
    assert part["greedy_episodes_differing"] == 0 < part["greedy_episodes"]
    # sampling seeded per episode and turn: the same samples; each episode reuses its own KV
    assert part["sampled_samples_differing"] == 0 < part["sampled_samples"]
    assert part["prefill_tokens"]["continuous"] == part["prefill_tokens"]["lockstep"] > 0
    # half the steps sleep 0.3 s: lockstep waits for each turn's sleepers, continuous does not
    assert part["seconds"]["continuous"][0] < part["seconds"]["lockstep"][0]
    summary = json.loads(out.read_text())["summary"]  # what the docs table shows
    for arm in ("lockstep", "continuous"):
        assert summary[arm]["latency_rollout_seconds"] == pytest.approx(
            sum(part["seconds"][arm]) / len(part["seconds"][arm])
        )
        assert summary[arm]["step_seconds"] > 0
    printed = capsys.readouterr().out
    assert "| lockstep |" in printed and "| continuous |" in printed

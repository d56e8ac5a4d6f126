"""bench/step_prefix_reuse.py on the tiny model: the reuse arm prefills fewer prompt tokens
than the prefill arm once a turn's context no longer continues the previous one whole, and the
learner's packing forwards fewer tokens than packing equal prompts only."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "step_prefix_reuse", Path(__file__).resolve().parent.parent / "bench" / "step_prefix_reuse.py"
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


@pytest.mark.slow
def test_the_reuse_arm_prefills_less(tmp_path):
    out = tmp_path / "r.json"
    # history_window=1 and 4 turns: from turn 3 on a context drops an earlier step
    overrides = ["rollout.max_turns=4", "rollout.history_window=1"]
    bench.main(["--smoke", "--recipes", "gigpo_household", "--repeats", "1", "--out", str(out),
                "--overrides", *overrides])  # fmt: skip
    result = json.loads(out.read_text())["results"]["gigpo_household"]
    prefilled, reused = result["prompt_tokens_prefilled"], result["prompt_tokens_reused"]
    # the arms decode through different prefill paths: a float rounding may change a sampled
    # token (and what follows), so the counts are compared, not the samples
    assert prefilled["reuse"] < prefilled["prefill"]
    assert reused["reuse"] > reused["prefill"]
    assert result["samples"] > 0 and 0 <= result["samples_differing"] <= result["samples"]
    learner = result["learner_tokens"]
    assert learner["opening_shared"] < learner["equal_prompts_packed"] <= learner["plain"]


def test_a_recipe_outside_step_and_memory_modes_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not step or memory"):
        bench.main(["--smoke", "--recipes", "search_qa_grpo", "--out", str(tmp_path / "r.json")])

"""The `swe_rl` recipe: SEARCH/REPLACE edits scored by difflib similarity, -1 on format errors.

The mechanism test rolls out hand-made answers to the shipped `mean-empty` task through the
trainer (the recipe's env, format and reward). The oracle adds `if not values: return 0.0`;
the hand-made edit returns `0` instead of `0.0`, so its diff is the oracle's diff with the two
characters ".0" deleted: every one of its L - 2 characters matches (M = L - 2) and difflib's
ratio 2M / (|a| + |b|) = 2 (L - 2) / (2L - 2) = (L - 2) / (L - 1), L = len(oracle diff).
"""

from __future__ import annotations

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.envs.code.repair import load_code_repair_tasks, oracle_completion
from agentic_rl.rewards.code import unified_diff
from agentic_rl.train.collect import rollout
from agentic_rl.train.setup import build
from agentic_rl.train.stages import train_recipe

SMOKE = ["model.name=tiny", "trainer.progress=false"]
# The smoke run skips the evaluations before RL (the generation they cost is most of a
# tiny-model run); the warm start, both RL steps and the final evaluation still run.
FAST = ["trainer.eval_before=false"]
TASK = next(t for t in load_code_repair_tasks() if t.task_id == "repair-mean-empty")
ORACLE_DIFF = (
    "@@ -1,5 +1,7 @@\n"
    " def mean(values):\n"
    '     """Arithmetic mean of a list of numbers."""\n'
    "+    if not values:\n"
    "+        return 0.0\n"
    "     return sum(values) / len(values)\n"
    " \n"
    " "
)
SEARCH = '    """Arithmetic mean of a list of numbers."""'
CLOSE_EDIT = (
    "<think>\nAn empty list must give zero.\n</think>\n<solution>\n```python\n"
    f"### stats/basic.py\n<<<<<<< SEARCH\n{SEARCH}\n=======\n{SEARCH}\n"
    "    if not values:\n        return 0\n>>>>>>> REPLACE\n```\n</solution>"
)
PLANS = [
    oracle_completion(TASK),  # the reference edit: 1
    CLOSE_EDIT,  # (L - 2) / (L - 1)
    CLOSE_EDIT.replace("<think>\nAn empty list must give zero.\n</think>\n", ""),  # no think
    CLOSE_EDIT.replace(SEARCH, SEARCH.replace("mean", "average")),  # SEARCH not in the file
    "I would add a check for empty lists.",  # no <solution> at all (an invalid turn)
]


def test_swe_rl_smoke(tmp_path, warm_start_episodes, no_stray_processes):
    cfg = load_config("swe_rl", [*SMOKE, *FAST, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.env.options["reward"] == "swe_rl" and cfg.rollout.chat_format == "swe_rl"
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    assert warm_start_episodes(tmp_path / "swe_rl") == 8  # every expert episode succeeded


def rewards(scripted, overrides):
    cfg = load_config("swe_rl", [*SMOKE, *overrides], smoke=True)  # one turn (its smoke section)
    setup = build(cfg)
    scripted(lambda ep, index, turn: PLANS[index])
    episodes = rollout(setup, [TASK], group_size=len(PLANS), seed=0, step=1)
    return [s[0].reward for s in episodes.samples]


def test_similarity_reward_and_minus_one_on_format_errors(scripted):
    assert unified_diff(TASK.fields["buggy"], TASK.fields["fixed"]) == ORACLE_DIFF
    n = len(ORACLE_DIFF)
    assert rewards(scripted, []) == [1.0, pytest.approx((n - 2) / (n - 1)), -1.0, -1.0, -1.0]


def test_the_recipe_format_penalty_makes_a_missing_solution_a_format_error(scripted):
    # with the env's default penalty a turn without <solution> would cost only 0.1
    assert rewards(scripted, ["env.format_penalty=0.1"])[4] == -0.1

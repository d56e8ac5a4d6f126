"""Command-line overrides on a multi-stage recipe: which stages they reach (config/load.py).

ttrl's stages: format_sft (env.seed 1, trainer.steps 0), then ttrl (warm_start.num_tasks 0).
"""

from __future__ import annotations

import pytest

from agentic_rl.config.load import _scope, load_config
from agentic_rl.config.parse import ConfigError


def stages(overrides: list[str]) -> dict[str, dict]:
    cfg = load_config("ttrl", overrides)
    return {s["trainer"]["run_name"].split("/")[-1]: s for s in cfg.stages}


def test_an_override_that_would_undo_a_stage_setting_is_an_error_naming_both_ways_out():
    # the trap: a smaller warm start for the SFT stage silently gave the RL stage a warm start
    with pytest.raises(ConfigError) as err:
        load_config("ttrl", ["warm_start.num_tasks=48"])
    message = str(err.value)
    assert "stage 'ttrl' sets itself (warm_start.num_tasks=0)" in message
    assert "'ttrl:warm_start.num_tasks=48'" in message and "'*:warm_start.num_tasks=48'" in message


def test_an_unscoped_override_reaches_every_stage_that_does_not_set_the_key():
    got = stages(["warm_start.lr=3e-5", "optim.lr=2e-6"])
    assert {name: s["optim"]["lr"] for name, s in got.items()} == {"format_sft": 2e-6, "ttrl": 2e-6}
    assert {name: s["warm_start"]["lr"] for name, s in got.items()} == {
        "format_sft": 3e-5,
        "ttrl": 3e-5,
    }


def test_the_same_value_as_the_stage_is_not_a_clash():
    got = stages(["warm_start.num_tasks=0", "format_sft:warm_start.num_tasks=0"])
    assert got["ttrl"]["warm_start"]["num_tasks"] == 0


def test_a_stage_scoped_override_acts_in_that_stage_only():
    cfg = load_config("ttrl", ["format_sft:warm_start.num_tasks=48"])
    got = {s["trainer"]["run_name"].split("/")[-1]: s for s in cfg.stages}
    assert got["format_sft"]["warm_start"]["num_tasks"] == 48
    assert got["ttrl"]["warm_start"]["num_tasks"] == 0
    assert cfg.warm_start.num_tasks == 200  # the recipe's base settings are untouched


def test_a_star_override_acts_in_every_stage_even_over_its_own_setting():
    got = stages(["*:trainer.steps=2"])
    assert {name: s["trainer"]["steps"] for name, s in got.items()} == {"format_sft": 2, "ttrl": 2}


def test_an_unknown_stage_or_a_scope_without_stages_is_an_error():
    with pytest.raises(ConfigError, match="names stage 'rl'.*format_sft"):
        load_config("ttrl", ["rl:trainer.steps=2"])
    with pytest.raises(ConfigError, match="it has no stages"):
        load_config("calculator_grpo", ["rl:trainer.steps=2"])


def test_a_colon_in_the_value_is_not_a_scope():
    assert _scope("env.reward_fn=rewards.py:score") == ("", "env.reward_fn=rewards.py:score")
    assert _scope("ttrl:optim.lr=1e-6") == ("ttrl", "optim.lr=1e-6")

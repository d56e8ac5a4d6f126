"""A recipe's own `smoke:` settings apply after the shared --smoke overrides, before the CLI's."""

import pytest

from agentic_rl.config.load import SMOKE_OVERRIDES, load_config
from agentic_rl.config.parse import ConfigError


def test_a_recipe_smoke_section_comes_after_the_shared_overrides(tmp_path):
    assert "rollout.max_turns=2" in SMOKE_OVERRIDES
    assert load_config("zerosearch", smoke=True).rollout.max_turns == 4  # its expert needs 3
    assert load_config("zerosearch", ["rollout.max_turns=3"], smoke=True).rollout.max_turns == 3
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env:\n  name: calculator\nsmoke:\n  rollout.max_turns: 5\n")
    assert load_config(str(recipe), smoke=True).rollout.max_turns == 5
    assert load_config(str(recipe)).rollout.max_turns == 4  # the default
    recipe.write_text("smoke:\n  - rollout.max_turns=5\n")
    with pytest.raises(ConfigError, match="smoke: must map dotted keys"):
        load_config(str(recipe), smoke=True)
    recipe.write_text("smoke:\n  rollout.max_turnz: 5\n")
    with pytest.raises(ConfigError, match="max_turnz"):
        load_config(str(recipe), smoke=True)

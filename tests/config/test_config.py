from pathlib import Path

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError, parse_override, resolve_recipe
from agentic_rl.config.schema import Config

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_default_recipe_loads_and_is_search_qa():
    cfg = load_config()
    assert cfg.recipe == "search_qa_grpo"
    assert cfg.env.name == "search_qa"
    assert cfg.model.name == "smollm2-135m"
    assert cfg.env.num_eval_tasks >= 100


def test_every_shipped_recipe_loads():
    names = [p.stem for p in RECIPES.glob("*.yaml")]
    assert "search_qa_grpo" in names
    for name in names:
        assert isinstance(load_config(name), Config)


def test_dotted_overrides_are_typed():
    cfg = load_config(None, ["algo.name=rloo", "algo.clip_high=0.28", "trainer.steps=3"])
    assert cfg.algo.name == "rloo"
    assert cfg.algo.clip_high == pytest.approx(0.28)
    assert cfg.trainer.steps == 3


def test_int_is_accepted_for_float_but_not_the_reverse():
    assert load_config(None, ["optim.lr=1"]).optim.lr == 1.0
    with pytest.raises(ConfigError, match="trainer.steps: expected an integer"):
        load_config(None, ["trainer.steps=2.5"])


def test_unknown_key_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'algo.clip_hgih'"):
        load_config(None, ["algo.clip_hgih=0.3"])
    path = write(tmp_path, "rollout:\n  group_sise: 4\n")
    with pytest.raises(ConfigError, match="rollout.group_sise"):
        load_config(path)
    with pytest.raises(ConfigError, match="unknown config key 'bogus'"):
        load_config(write(tmp_path, "bogus: 1\n"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.name=ppo2", "algo.name: 'ppo2' is not one of"),
        ("algo.loss_agg=mean", "algo.loss_agg"),
        ("rollout.group_size=0", "rollout.group_size must be > 0"),
        ("optim.lr=-1", "optim.lr must be >= 0"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ("trainer.tensorboard=yes please", "expected true/false"),
        ("algo.dual_clip=0.5", "algo.dual_clip must be > 1"),
        ("env.name=chess", "env.name"),
    ],
)
def test_invalid_values_fail_at_load(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_settings_that_would_do_nothing_are_errors():
    with pytest.raises(ConfigError, match="kl_in_reward=true does nothing"):
        load_config(None, ["algo.kl_in_reward=true"])
    with pytest.raises(ConfigError, match="needs an estimator that takes the KL as a reward"):
        load_config(None, ["algo.kl_in_reward=true", "algo.kl_coef=0.1"])
    with pytest.raises(ConfigError, match="group_size must be >= 2"):
        load_config(None, ["rollout.group_size=1"])


def test_recovery_demonstrations_need_a_warm_start_and_an_env_with_a_mistake():
    assert load_config(None, ["warm_start.recovery_fraction=0.25"]).warm_start.recovery_fraction
    with pytest.raises(ConfigError, match=r"recovery_fraction must be in \[0, 1\], got 1.5"):
        load_config(None, ["warm_start.recovery_fraction=1.5"])
    with pytest.raises(ConfigError, match="num_tasks=0 disables the warm start"):
        load_config(None, ["warm_start.recovery_fraction=0.25", "warm_start.num_tasks=0"])
    with pytest.raises(ConfigError, match="env.name=calculator's scripted expert has no mistake"):
        load_config("calculator_grpo", ["warm_start.recovery_fraction=0.25"])


def test_malformed_recipes(tmp_path):
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "model: [unclosed\n"))
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="model: expected a mapping"):
        load_config(write(tmp_path, "model: 3\n"))
    with pytest.raises(ConfigError, match="recipe file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="unknown recipe 'nope'"):
        resolve_recipe("nope")


def test_override_parsing():
    assert parse_override("a.b=3") == ("a.b", 3)
    assert parse_override("a.b=true") == ("a.b", True)
    assert parse_override("a.b=text") == ("a.b", "text")
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_override("novalue")


def test_smoke_shrinks_the_run_but_keeps_stages():
    cfg = load_config(None, smoke=True)
    assert cfg.trainer.steps == 2
    assert cfg.env.num_eval_tasks == 4
    assert cfg.warm_start.num_tasks == 8  # the default recipe's warm start stays, tiny

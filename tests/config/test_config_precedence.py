"""What the math receives is what the user meant (issue 31, items 3 and 6): an estimator's own
loss aggregation wins over one it inherited; a conflicting explicit choice, and a setting that
cannot act, fail at load naming the keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError

DR_GRPO_AGG = "seq-mean-token-sum-norm"


def recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text("env:\n  name: calculator\n" + text)
    return path


def test_an_estimators_own_aggregation_wins_over_the_recipes():
    # search_qa_grpo sets loss_agg: seq-mean-token-mean for GRPO; the user asks for Dr. GRPO,
    # whose constant normaliser is the method: the recipe's choice was made for another estimator
    assert load_config(None, ["algo.name=dr_grpo"]).algo.loss_agg == DR_GRPO_AGG
    # dapo_math's token-mean, too
    assert load_config("dapo_math", ["algo.name=dr_grpo"]).algo.loss_agg == DR_GRPO_AGG
    # estimators without an aggregation of their own keep the recipe's (DAPO's token-mean)
    assert load_config("dapo_math", ["algo.name=rloo"]).algo.loss_agg == "token-mean"


def test_a_user_choice_that_conflicts_with_the_estimators_own_names_both():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algo.name=dr_grpo", "algo.loss_agg=token-mean"])
    message = str(err.value)
    assert "algo.name=dr_grpo" in message and "algo.loss_agg=token-mean" in message
    assert DR_GRPO_AGG in message
    # on a recipe that runs Dr. GRPO, the user's conflicting aggregation alone
    with pytest.raises(ConfigError, match="algo.loss_agg=seq-mean-token-mean"):
        load_config("calculator_grpo", ["*:algo.name=dr_grpo", "algo.loss_agg=seq-mean-token-mean"])
    # the estimator's own, or "" (= the estimator's own), is no conflict
    assert load_config(None, ["algo.name=dr_grpo", f"algo.loss_agg={DR_GRPO_AGG}"])
    assert load_config(None, ["algo.name=dr_grpo", "algo.loss_agg="]).algo.loss_agg == DR_GRPO_AGG


def test_a_recipe_that_pairs_the_estimator_with_an_aggregation_keeps_it(tmp_path):
    # MemAgent: Dr. GRPO's advantage with a token-level loss, chosen together in one recipe
    assert load_config("memagent").algo.loss_agg == "token-mean"
    pair = recipe(tmp_path, "algo:\n  name: dr_grpo\n  loss_agg: token-mean\n")
    assert load_config(pair).algo.loss_agg == "token-mean"
    # ...but a stage that switches to Dr. GRPO does not inherit the recipe's aggregation
    staged = recipe(
        tmp_path,
        "algo:\n  loss_agg: token-mean\nstages:\n  - name: a\n  - name: b\n"
        "    algo: {name: dr_grpo}\n",
    )
    cfg = load_config(staged)
    assert [s["algo"]["loss_agg"] for s in cfg.stages] == ["token-mean", DR_GRPO_AGG]
    # restating the recipe's own pairing on the command line changes nothing: no conflict
    assert load_config(pair, ["algo.loss_agg=token-mean"]).algo.loss_agg == "token-mean"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["algo.gamma=0.9"], "algo.gamma"),
        (["algo.lam=0.95"], "algo.lam"),
        (["algo.value_coef=1.0"], "algo.value_coef"),
        (["algo.value_clip=0.5"], "algo.value_clip"),
        (["algo.name=reinforce_pp", "algo.lam=0.9"], "algo.lam"),
        (["algo.name=reinforce_pp", "algo.value_clip=0.1"], "algo.value_clip"),
        (["algo.kl_estimator=k2"], "algo.kl_estimator"),
        # set explicitly, even to the default value: it still cannot act
        (["algo.kl_estimator=k3"], "algo.kl_estimator"),
        (["algo.gamma=1.0"], "algo.gamma"),
        (["algo.value_coef=0.5"], "algo.value_coef"),
    ],
)
def test_settings_without_a_critic_or_a_kl_term_fail_at_load(overrides, key):
    # the default recipe: GRPO, no critic, kl_coef=0
    with pytest.raises(ConfigError, match=f"{key} is set but does nothing"):
        load_config(None, overrides)


def test_the_same_settings_load_where_they_act(tmp_path):
    load_config(None, ["algo.name=reinforce_pp", "algo.gamma=0.99"])  # discounted returns
    ppo = ["algo.name=ppo", "algo.gamma=0.99", "algo.lam=0.95", "algo.value_clip=0.5"]
    load_config(None, [*ppo, "algo.value_coef=1.0"])
    load_config(None, ["algo.kl_coef=0.01", "algo.kl_estimator=k2"])
    # a recipe that sets kl_estimator without a KL is refused too
    with pytest.raises(ConfigError, match="algo.kl_estimator is set but does nothing"):
        load_config(recipe(tmp_path, "algo:\n  kl_coef: 0.0\n  kl_estimator: k3\n"))

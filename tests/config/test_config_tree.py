"""rollout.tree validation (config/validate_tree.py): shape, group size, modes, branchable envs."""

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.validate_tree import tree_leaves
from agentic_rl.envs.math.calculator import CalculatorEnv

TREE = ["env.name=calculator", "env.topk=3", "rollout.tree.roots=2", "rollout.group_size=6"]


def test_tree_leaves_by_hand():
    cfg = load_config(None, [*TREE, "algo.name=tree_grpo"])
    assert tree_leaves(cfg.rollout.tree) == 6  # 2 x (1 + 1 x 2)
    cfg = load_config(
        None,
        [
            *TREE[:3],
            "rollout.tree.expansions=3",
            "rollout.tree.iterations=2",
            "rollout.group_size=14",
        ],
    )
    assert tree_leaves(cfg.rollout.tree) == 14  # 2 x (1 + 2 x 3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.group_size=8"], "rollout.group_size=8 must equal .* = 6"),
        (["rollout.tree.expansions=0"], "rollout.tree.expansions must be >= 1"),
        (["rollout.tree.roots=-1"], "rollout.tree.roots must be >= 0"),
        (["rollout.mode=step", "algo.name=gigpo", "env.name=gridworld"], "rollout.mode=step"),
        (["rollout.context_budget=300"], "rollout.context_budget"),
        (["filters.roc=true"], "filters.roc"),
    ],
)
def test_tree_settings_that_cannot_act_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*TREE, *overrides])


def test_tree_keys_without_trees_and_tree_grpo_without_trees_are_refused():
    with pytest.raises(ConfigError, match="rollout.tree.expansions is set but does nothing"):
        load_config(None, ["rollout.tree.expansions=2"])
    with pytest.raises(ConfigError, match="algo.name=tree_grpo normalises within each tree"):
        load_config(None, ["algo.name=tree_grpo"])


def test_an_env_that_cannot_branch_is_refused(monkeypatch):
    monkeypatch.setattr(CalculatorEnv, "branchable", False, raising=False)
    with pytest.raises(ConfigError, match="env.name=calculator declares branchable = False"):
        load_config(None, TREE)


def test_leaf_subsampling_loads_for_every_tree_estimator():
    for name in ("tree_grpo", "tree_grpo_2norm", "tree_grpo_inner", "tree_grpo_per_token"):
        cfg = load_config(None, [*TREE, f"algo.name={name}", "rollout.tree.train_leaves=2"])
        assert cfg.rollout.tree.train_leaves == 2 and cfg.algo.name == name
    # one leaf a tree is GRPO over the task's roots leaves
    cfg = load_config(None, [*TREE, "rollout.tree.train_leaves=1"])
    assert cfg.rollout.tree.train_leaves == 1


ENTROPY = ["rollout.tree.branch=entropy", "rollout.group_size=4", "rollout.max_turns=3"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["rollout.tree.train_leaves=-1"], "rollout.tree.train_leaves must be >= 0"),
        (["rollout.tree.train_leaves=3"], r"train_leaves=3 must be below .* = 3"),
        (["rollout.tree.train_leaves=7"], r"train_leaves=7 must be below .* = 3"),
        (
            ["rollout.tree.train_leaves=1", "algo.name=tree_grpo_inner"],
            "train_leaves=1 trains one leaf per tree, and algo.name=tree_grpo_inner",
        ),
        (
            ["rollout.tree.roots=1", "rollout.group_size=3", "rollout.tree.train_leaves=1"],
            r"algo.name=grpo compares the samples of a group, .* = 1 leaf",
        ),
        (
            [*ENTROPY, "rollout.tree.train_leaves=2"],
            "rollout.tree.train_leaves acts only with rollout.tree.branch=random",
        ),
        (
            ["algo.name=tree_grpo_per_token", "algo.policy_loss=gspo"],
            "algo.name=tree_grpo_per_token gives token-level advantages",
        ),
    ],
)
def test_leaf_subsampling_and_variants_that_cannot_act_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*TREE, *overrides])


def test_subsampling_and_variants_without_trees_are_refused():
    with pytest.raises(ConfigError, match="rollout.tree.train_leaves is set but does nothing"):
        load_config(None, ["rollout.tree.train_leaves=2"])
    for name in ("tree_grpo_2norm", "tree_grpo_inner", "tree_grpo_per_token"):
        with pytest.raises(ConfigError, match=f"algo.name={name} normalises within each tree"):
            load_config(None, [f"algo.name={name}"])

"""Validation of tree-shaped rollouts (`rollout.tree`, rollout/tree.py): the tree's shape,
the group it fills, the rollout settings it cannot work with, and the env's ability to branch.
Called by `validate.validate`."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import TreeConfig

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

TREE_KEYS = ("roots", "expansions", "iterations")


def tree_leaves(tree: TreeConfig) -> int:
    """Leaves a task's trees end with: M roots x (1 + L iterations x N expansions); each
    expansion adds one leaf. E.g. Tree-GRPO's defaults M=2, N=2, L=1: 2 x 3 = 6."""
    return tree.roots * (1 + tree.iterations * tree.expansions)


def validate_tree(cfg: Config, explicit: Collection[str] = ()) -> None:
    """Reject tree settings that are out of range, that cannot act, or that the rollout or the
    env cannot honour; and estimators that need trees (algo.name=tree_grpo) without them."""
    tree, rollout = cfg.rollout.tree, cfg.rollout
    estimator = ADVANTAGE_ESTIMATORS[cfg.algo.name]
    for key in TREE_KEYS:
        if getattr(tree, key) < 0:
            raise ConfigError(f"rollout.tree.{key} must be >= 0, got {getattr(tree, key)}")
    if tree.roots == 0:
        default = TreeConfig()
        for key in TREE_KEYS[1:]:
            name = f"rollout.tree.{key}"
            if name in explicit or getattr(tree, key) != getattr(default, key):
                raise ConfigError(
                    f"{name} is set but does nothing: rollout.tree.roots=0 plays no trees"
                )
        if estimator.tree_groups:
            raise ConfigError(
                f"algo.name={cfg.algo.name} normalises within each tree: set rollout.tree.roots "
                "(e.g. rollout.tree.roots=2) so that episodes are played as trees"
            )
        return
    for key in TREE_KEYS[1:]:
        if getattr(tree, key) < 1:
            raise ConfigError(
                f"rollout.tree.{key} must be >= 1 with rollout.tree.roots > 0 (set "
                f"rollout.tree.roots=0 for independent episodes), got {getattr(tree, key)}"
            )
    leaves = tree_leaves(tree)
    if rollout.group_size != leaves:
        raise ConfigError(
            f"rollout.group_size={rollout.group_size} must equal the leaves of a task's trees, "
            f"rollout.tree.roots x (1 + iterations x expansions) = {tree.roots} x (1 + "
            f"{tree.iterations} x {tree.expansions}) = {leaves}: set rollout.group_size={leaves}"
        )
    if tree.iterations * rollout.max_turns >= 1000:
        raise ConfigError(
            "rollout.tree.iterations x rollout.max_turns must stay below 1000 (each round samples "
            "with its own seeds, turn + round x max_turns)"
        )
    _refuse_other_modes(cfg)
    from agentic_rl.envs.registry import env_class

    if not getattr(env_class(cfg.env.name), "branchable", True):
        raise ConfigError(
            f"rollout.tree needs an env whose episodes can branch (reset and replay the action "
            f"prefix, or fork): env.name={cfg.env.name} declares branchable = False; set "
            "rollout.tree.roots=0"
        )


def _refuse_other_modes(cfg: Config) -> None:
    rollout, f = cfg.rollout, cfg.filters
    refused = {
        f"rollout.mode={rollout.mode}": rollout.mode != "episode",
        f"rollout.scheme={rollout.scheme}": rollout.scheme != "sample",
        "rollout.context_budget": rollout.context_budget > 0,
        "filters.roc": f.roc,
        "filters.ttrl_vote_samples": f.ttrl_vote_samples > 0,
    }
    for what, bad in refused.items():
        if bad:
            raise ConfigError(
                f"rollout.tree plays whole episodes as branches of a tree (rollout.mode=episode, "
                f"sampled groups of exactly the trees' leaves): it cannot be combined with {what}"
            )

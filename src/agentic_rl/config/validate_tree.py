"""Validation of tree-shaped rollouts (`rollout.tree`, rollout/tree.py): the tree's shape,
the group it fills, the rollout settings it cannot work with, and the env's ability to branch;
for ARPO's entropy branching (rollout.tree.branch=entropy) also its rule's keys and a generator
that reports entropies. Called by `validate.validate`."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import RolloutConfig, TreeConfig

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

TREE_KEYS = ("roots", "expansions", "iterations", "train_leaves")
SHAPE_KEYS = ("expansions", "iterations")
"""The shape of Tree-GRPO's trees: >= 1 whenever it plays trees."""
RANDOM_KEYS = (*SHAPE_KEYS, "train_leaves")
"""Keys that act only with rollout.tree.branch=random (Tree-GRPO)."""
ENTROPY_KEYS = ("entropy_tokens", "entropy_weight", "branch_threshold", "beam_size")
"""Keys that act only with rollout.tree.branch=entropy (ARPO)."""
BRANCHES = ("random", "entropy")
SEED_TURNS = 1000
"""A rollout's actor seeds its calls seed x 1000 + turn index: a tree's turn indices (turn +
round or step x max_turns) must stay below it, or they would reuse another seed's streams."""


def tree_leaves(tree: TreeConfig) -> int:
    """Leaves a task's trees end with: M roots x (1 + L iterations x N expansions); each
    expansion adds one leaf. E.g. Tree-GRPO's defaults M=2, N=2, L=1: 2 x 3 = 6."""
    return tree.roots * (1 + tree.iterations * tree.expansions)


def entropy_tree_steps(rollout: RolloutConfig) -> int:
    """The most steps an entropy-branched rollout takes (each step plays one turn of every live
    leaf). A tree lasts at most 2 x max_turns - 1 steps: its root plays a turn a step, and a
    branch from node k, made once its parent has played turn k, plays its turn k a step later,
    so every level of branching lags one step, over at most max_turns - 1 levels (a branch's
    branch points lie after its own). A task plays its trees one after another at worst: the
    N roots together, then (M - N) fresh roots one at a time. E.g. max_turns 4, M 8, N 2: 49."""
    per_tree = 2 * rollout.max_turns - 1
    return (rollout.group_size - rollout.tree.roots + 1) * per_tree


def validate_tree(cfg: Config, explicit: Collection[str] = ()) -> None:
    """Reject tree settings that are out of range, that cannot act, or that the rollout or the
    env cannot honour; and estimators that need trees (algo.name=tree_grpo) without them."""
    tree = cfg.rollout.tree
    estimator = ADVANTAGE_ESTIMATORS[cfg.algo.name]
    for key in TREE_KEYS:
        if getattr(tree, key) < 0:
            raise ConfigError(f"rollout.tree.{key} must be >= 0, got {getattr(tree, key)}")
    if tree.branch not in BRANCHES:
        raise ConfigError(
            f"rollout.tree.branch must be one of {', '.join(BRANCHES)}, got {tree.branch!r}"
        )
    if tree.roots == 0:
        for key in [*TREE_KEYS[1:], "branch", *ENTROPY_KEYS]:
            if _is_set(tree, key, explicit):
                raise ConfigError(
                    f"rollout.tree.{key} is set but does nothing: rollout.tree.roots=0 plays no "
                    "trees"
                )
        if estimator.tree_groups:
            raise ConfigError(
                f"algo.name={cfg.algo.name} normalises within each tree: set rollout.tree.roots "
                "(e.g. rollout.tree.roots=2) so that episodes are played as trees"
            )
        return
    if tree.branch == "entropy":
        _validate_entropy(cfg, explicit)
    else:
        _validate_random(cfg, explicit)
    _refuse_other_modes(cfg)
    from agentic_rl.envs.registry import env_class

    if not getattr(env_class(cfg.env.name), "branchable", True):
        raise ConfigError(
            f"rollout.tree needs an env whose episodes can branch (reset and replay the action "
            f"prefix, or fork): env.name={cfg.env.name} declares branchable = False; set "
            "rollout.tree.roots=0"
        )


def _is_set(tree: TreeConfig, key: str, explicit: Collection[str]) -> bool:
    """Was rollout.tree.`key` given (on the command line or in a recipe) or moved off its
    default?"""
    return f"rollout.tree.{key}" in explicit or getattr(tree, key) != getattr(TreeConfig(), key)


def _validate_random(cfg: Config, explicit: Collection[str]) -> None:
    """Tree-GRPO's random expansion: its shape and the group it fills; ARPO's keys refused."""
    tree, rollout = cfg.rollout.tree, cfg.rollout
    for key in ENTROPY_KEYS:
        if _is_set(tree, key, explicit):
            raise ConfigError(
                f"rollout.tree.{key} acts only with rollout.tree.branch=entropy (ARPO's "
                "branching); set rollout.tree.branch=entropy or drop it"
            )
    for key in SHAPE_KEYS:
        if getattr(tree, key) < 1:
            raise ConfigError(
                f"rollout.tree.{key} must be >= 1 with rollout.tree.roots > 0 (set "
                f"rollout.tree.roots=0 for independent episodes), got {getattr(tree, key)}"
            )
    if tree.train_leaves:
        _validate_train_leaves(cfg)
    leaves = tree_leaves(tree)
    if rollout.group_size != leaves:
        raise ConfigError(
            f"rollout.group_size={rollout.group_size} must equal the leaves of a task's trees, "
            f"rollout.tree.roots x (1 + iterations x expansions) = {tree.roots} x (1 + "
            f"{tree.iterations} x {tree.expansions}) = {leaves}: set rollout.group_size={leaves}"
        )
    if tree.iterations * rollout.max_turns >= SEED_TURNS:
        raise ConfigError(
            "rollout.tree.iterations x rollout.max_turns must stay below 1000 (each round samples "
            "with its own seeds, turn + round x max_turns)"
        )


def _validate_train_leaves(cfg: Config) -> None:
    """Tree-GRPO's leaf subsampling (K = rollout.tree.train_leaves > 0): fewer leaves than a
    tree has, and enough for the estimator's groups and trees."""
    tree, algo = cfg.rollout.tree, cfg.algo
    estimator = ADVANTAGE_ESTIMATORS[algo.name]
    per_tree = 1 + tree.iterations * tree.expansions
    if tree.train_leaves >= per_tree:
        raise ConfigError(
            f"rollout.tree.train_leaves={tree.train_leaves} must be below the leaves of each "
            f"tree, 1 + iterations x expansions = {per_tree}: K >= {per_tree} would train every "
            "leaf, which is rollout.tree.train_leaves=0"
        )
    if estimator.tree_groups and tree.train_leaves < 2:
        raise ConfigError(
            f"rollout.tree.train_leaves=1 trains one leaf per tree, and algo.name={algo.name} "
            "normalises within each tree: its intra-tree term would have nothing to compare. "
            "Set rollout.tree.train_leaves >= 2, or algo.name=grpo"
        )
    if estimator.needs_groups and tree.roots * tree.train_leaves < 2:
        raise ConfigError(
            f"algo.name={algo.name} compares the samples of a group, and a task trains "
            f"rollout.tree.roots x train_leaves = {tree.roots * tree.train_leaves} leaf: raise "
            "rollout.tree.roots or rollout.tree.train_leaves"
        )


def _validate_entropy(cfg: Config, explicit: Collection[str]) -> None:
    """ARPO's entropy branching: its rule's ranges, a budget the branches can fill, a generator
    that reports entropies, an actor that asks for them; Tree-GRPO's keys refused."""
    tree, rollout = cfg.rollout.tree, cfg.rollout
    for key in RANDOM_KEYS:
        if _is_set(tree, key, explicit):
            raise ConfigError(
                f"rollout.tree.{key} acts only with rollout.tree.branch=random (Tree-GRPO's "
                "expansion rounds and leaf subsampling); ARPO's branches fill "
                "rollout.group_size instead and every leaf trains: drop it"
            )
    ranges = {
        "entropy_tokens": (tree.entropy_tokens >= 1, ">= 1"),
        "beam_size": (tree.beam_size >= 2, ">= 2 (a branch point gets beam_size - 1 copies)"),
        "entropy_weight": (tree.entropy_weight >= 0, ">= 0"),
        "branch_threshold": (
            0 <= tree.branch_threshold < 1,
            "in [0, 1) (p = clamp(u - w dH, 0, 1) <= 1 always: every branch point would branch "
            "and rollout.tree.entropy_weight could not act)",
        ),
    }
    for key, (ok, bound) in ranges.items():
        if not ok:
            raise ConfigError(f"rollout.tree.{key} must be {bound}, got {getattr(tree, key)}")
    if rollout.group_size <= tree.roots:
        raise ConfigError(
            f"rollout.group_size={rollout.group_size} is ARPO's budget of leaves per task and "
            f"must exceed rollout.tree.roots={tree.roots} (its initial full episodes), or no "
            "branch could be made"
        )
    if rollout.max_turns < 2:
        raise ConfigError(
            "rollout.tree.branch=entropy branches after a tool result, before the next turn: "
            "rollout.max_turns must be >= 2"
        )
    refused = {
        f"rollout.backend={rollout.backend}": rollout.backend != "hf",
        "rollout.think_budget": rollout.think_budget > 0,
    }
    _refuse_any(
        refused,
        lambda what: (
            "rollout.tree.branch=entropy reads each turn's token entropies from the generator, "
            f"which {what} does not give (only the hf backend's plain sampler computes them): "
            "use rollout.backend=hf without rollout.think_budget, or rollout.tree.branch=random"
        ),
    )
    steps = entropy_tree_steps(rollout)
    if steps * rollout.max_turns >= SEED_TURNS:
        raise ConfigError(
            f"rollout.tree.branch=entropy may play up to (group_size - roots + 1) x (2 x "
            f"max_turns - 1) = {steps} steps, each seeded turn + step x max_turns, which must "
            f"stay below {SEED_TURNS}: lower rollout.group_size - rollout.tree.roots or "
            "rollout.max_turns"
        )


def _refuse_other_modes(cfg: Config) -> None:
    """The rollout settings a tree cannot be played with (whole episodes, sampled groups)."""
    rollout, f = cfg.rollout, cfg.filters
    refused = {
        f"rollout.mode={rollout.mode}": rollout.mode != "episode",
        f"rollout.scheme={rollout.scheme}": rollout.scheme != "sample",
        "rollout.context_budget": rollout.context_budget > 0,
        "filters.roc": f.roc,
        "filters.ttrl_vote_samples": f.ttrl_vote_samples > 0,
    }
    _refuse_any(
        refused,
        lambda what: (
            "rollout.tree plays whole episodes as branches of a tree (rollout.mode=episode, "
            f"sampled groups of exactly the trees' leaves): it cannot be combined with {what}"
        ),
    )


def _refuse_any(refused: Mapping[str, bool], message: Callable[[str], str]) -> None:
    """Raise ConfigError for the first setting of `refused` that is on (its value True): one
    rule for each list of settings a tree cannot work with, `message(setting)` saying why."""
    for what, bad in refused.items():
        if bad:
            raise ConfigError(message(what))

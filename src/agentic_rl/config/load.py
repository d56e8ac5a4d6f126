"""Loading a recipe: YAML (a path or a recipe name), dotted command-line overrides, `--smoke`,
multi-stage `stages:`, then validation (validate.py) of every resulting config.

    cfg = load_config("recipes/search_qa_grpo.yaml", ["algo.name=rloo", "trainer.steps=10"])

An unknown key, a value of the wrong type or a setting that makes no sense for the chosen
algorithm raises `ConfigError` naming the key.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS, DEFAULT_LOSS_AGG
from agentic_rl.config.algo import AlgoConfig
from agentic_rl.config.parse import (
    ConfigError,
    build_dataclass,
    parse_override,
    resolve_recipe,
    set_dotted,
)
from agentic_rl.config.schema import Config
from agentic_rl.config.validate import validate

# --smoke: a few tiny steps that exercise every stage of the recipe, for tests and quick checks.
SMOKE_OVERRIDES = [
    "trainer.steps=2",
    "trainer.save_every=1",
    "trainer.max_minutes=0",
    "env.num_train_tasks=16",
    "env.num_eval_tasks=4",
    "rollout.tasks_per_step=2",
    "rollout.group_size=2",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=16",
    "rollout.max_total_tokens=320",
    "rollout.eval_batch_size=4",
    "optim.micro_batch_size=2",
]


def load_config(
    recipe: str | Path | None = None, overrides: list[str] | None = None, smoke: bool = False
) -> Config:
    """Load a YAML recipe (a path or a name), apply dotted overrides, validate."""
    path = resolve_recipe(str(recipe) if recipe is not None else None)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"recipe {path} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(data).__name__}")
    data.setdefault("recipe", path.stem)
    stages = data.pop("stages", None) or []
    smoke_settings = data.pop("smoke", None) or {}
    user = list(overrides or [])
    scoped = [_scope(text) for text in user]
    stage_names = [stage.get("name") for stage in stages if isinstance(stage, dict)]
    for scope, text in scoped:
        if scope not in ("", "*") and scope not in stage_names:
            where = f"its stages are {stage_names}" if stage_names else "it has no stages"
            raise ConfigError(f"override '{text}' names stage '{scope}', but {path.stem}: {where}")
    # The framework's smoke settings act in every stage, like a '*:' override.
    forced = [
        ("*", text) for text in (_smoke_overrides(data, smoke_settings, user) if smoke else [])
    ]
    user_scoped, scoped = scoped, forced + scoped
    resolved = [_stage_data(data, stage, i, scoped, smoke) for i, stage in enumerate(stages)]
    names = [stage["trainer"]["run_name"] for stage in resolved]
    if len(set(names)) != len(names):
        raise ConfigError(f"stage names must be distinct, got {[s['name'] for s in stages]}")
    recipe_data = copy.deepcopy(data)
    _apply_overrides(data, [text for scope, text in scoped if scope in ("", "*")])
    settle_loss_agg(data, _layers(recipe_data, None, forced, user_scoped, ""))
    for stage, raw in zip(resolved, stages, strict=True):
        own = {k: v for k, v in raw.items() if k != "name"}
        settle_loss_agg(stage, _layers(recipe_data, own, forced, user_scoped, raw["name"]))
    set_by_user = {parse_override(_scope(text)[1])[0] for text in user}
    _drop_generated_task_options(data, set_by_user)
    for stage in resolved:
        _drop_generated_task_options(stage, set_by_user)
    cfg = _build(data, smoke)
    cfg.stages = [_build(stage, smoke).to_dict() for stage in resolved]
    for stage, raw in zip(cfg.stages[:-1], stages, strict=False):
        choice = stage["model"]["role_policies"]
        if choice != "shared":  # it exports a team (checkpoint/export.py save_policy)
            raise ConfigError(
                f"stage '{raw['name']}' has model.role_policies={choice}: a stage hands the "
                "next one a single model (model.name), a policy per role exports a model per "
                "role; use a policy per role in the last stage only"
            )
    return cfg


def _drop_generated_task_options(data: dict[str, Any], set_by_user: set[str]) -> None:
    """With both `env.train_file` and `env.eval_file` set, no task is generated, so the
    recipe's `env.options` that only shape generated tasks (MemAgent's doc_tokens and hops,
    Sokoban's dim...) have nothing to act on: they are dropped, so a shipped recipe takes the
    user's files as it is. One the user set on this command line (`env.options.K=...` or a
    whole `env.options=...`) stays, and validation refuses it as a setting that does nothing."""
    env = data.get("env")
    if not isinstance(env, dict) or not (env.get("train_file") and env.get("eval_file")):
        return
    options = env.get("options")
    if not isinstance(options, dict) or "env.options" in set_by_user:
        return
    from agentic_rl.envs.registry import env_names, env_parameters, task_parameters

    name = env.get("name")
    if name not in env_names():
        return  # validation names the unknown env
    task_only = task_parameters(name) - env_parameters(name)
    for key in [k for k in options if k in task_only and f"env.options.{k}" not in set_by_user]:
        del options[key]


Layer = tuple[str, dict[str, Any], bool]
"""One place a config's settings come from: (its name for messages, the settings after it
applied, whether the user typed it on the command line)."""


def _layers(
    recipe: dict[str, Any],
    own: dict[str, Any] | None,
    forced: list[tuple[str, str]],
    user: list[tuple[str, str]],
    stage: str,
) -> list[Layer]:
    """The settings of one config (the recipe's, or `stage`'s with its `own` sections) after
    each place they come from, in the order they apply: the recipe, the stage, the smoke
    settings (`forced`), the command line (the `user` overrides that reach it)."""
    data = copy.deepcopy(recipe)
    layers: list[Layer] = [("the recipe", copy.deepcopy(data), False)]
    if own is not None:
        data = _merge(data, own)
        layers.append((f"stage '{stage}'", copy.deepcopy(data), False))
    _apply_overrides(data, [text for _, text in forced])
    layers.append(("the smoke settings", copy.deepcopy(data), False))
    _apply_overrides(data, [text for scope, text in user if scope in ("", "*", stage)])
    layers.append(("the command line", data, True))
    return layers


def _changed_at(layers: list[Layer], key: str) -> int:
    """The index of the last layer that changed `key`'s value; -1 if none set it (default)."""
    at, before = -1, _MISSING
    for i, (_, data, _) in enumerate(layers):
        value = _get_dotted(data, key)
        if value is not _MISSING and (before is _MISSING or value != before):
            at = i
        before = value
    return at


def settle_loss_agg(data: dict[str, Any], layers: list[Layer]) -> None:
    """algo.loss_agg when the estimator (algo.name) prescribes an aggregation of its own
    (`Estimator.loss_agg`: Dr. GRPO's constant normaliser is part of the method).

    An aggregation set in an earlier place than the estimator was chosen (the recipe's, when
    the command line or a stage switches algo.name) was chosen for another estimator: the
    estimator's own replaces it. One chosen with the estimator (the same place, or later)
    stands where the recipe chose it (MemAgent pairs Dr. GRPO's advantage with a token-level
    loss); on the command line a conflicting one is a ConfigError naming both keys. Sets
    `data`'s algo.loss_agg in place; "" and unset are filled in by `_build`."""
    name = _get_dotted(data, "algo.name")
    estimator = ADVANTAGE_ESTIMATORS.get(name if isinstance(name, str) else AlgoConfig.name)
    own = estimator.loss_agg if estimator is not None else ""
    agg = _get_dotted(data, "algo.loss_agg")
    if not own or agg is _MISSING or agg in ("", own):
        return
    at = _changed_at(layers, "algo.loss_agg")
    if at < _changed_at(layers, "algo.name"):
        set_dotted(data, "algo.loss_agg", own)
        return
    where, _, by_user = layers[at]
    if by_user:
        raise ConfigError(
            f"algo.loss_agg={agg} (set on {where}) conflicts with algo.name={name}, whose own "
            f"aggregation is {own}: drop the algo.loss_agg override (or set it to {own}), or "
            "choose an estimator without an aggregation of its own"
        )


def _smoke_overrides(
    recipe: dict[str, Any], settings: Any = None, user: list[str] | None = None
) -> list[str]:
    """SMOKE_OVERRIDES for `recipe`. A recipe with a warm start keeps its own token budgets: its
    scripted expert's turns (a code block, a JSON tool call, an edit) must fit them, or every
    demonstration is cut short and the warm start has nothing to train on. Unless the `user`
    overrides name the run directory (trainer.out_dir, trainer.run_name), it is RUN_NAME-smoke
    (default: RECIPE-smoke), apart from the full run's. The recipe's own
    `smoke:` mapping ({dotted key: value}, e.g. the turns a multi-hop expert needs) comes last."""
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise ConfigError(f"smoke: must map dotted keys to values, got {settings!r}")
    extra = [f"{key}={json.dumps(value)}" for key, value in settings.items()]
    # A smoke run gets its own run directory: it must never resume (or overwrite) the full run
    # (where the user names the directory, the resume check refuses a full run's checkpoint).
    named = {"trainer.out_dir", "trainer.run_name"} & {o.split("=")[0].strip() for o in user or []}
    if not named:
        name = (recipe.get("trainer") or {}).get("run_name") or recipe["recipe"]
        extra.insert(0, f"trainer.run_name={json.dumps(f'{name}-smoke')}")
    if not (recipe.get("warm_start") or {}).get("num_tasks"):
        return list(SMOKE_OVERRIDES) + extra
    budgets = ("rollout.max_tokens_per_turn=", "rollout.max_total_tokens=")
    return [text for text in SMOKE_OVERRIDES if not text.startswith(budgets)] + extra


def _scope(text: str) -> tuple[str, str]:
    """`STAGE:section.key=value` -> ("STAGE", "section.key=value"); `*:` -> every stage, even one
    that sets the key itself; no prefix -> ("", text). The colon is looked for in the key only
    (values such as env.reward_fn=file.py:fn keep theirs)."""
    key = text.split("=", 1)[0]
    if ":" not in key:
        return "", text
    scope, rest = text.split(":", 1)
    return scope.strip(), rest


def _flat_keys(data: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += _flat_keys(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}")
    return out


def _get_dotted(data: dict[str, Any], key: str) -> Any:
    """The value at a dotted key, or a marker where the path is missing or not a mapping."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def _apply_overrides(data: dict[str, Any], overrides: list[str]) -> None:
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value)


def _build(data: dict[str, Any], smoke: bool) -> Config:
    """The validated Config of `data`. The keys `data` names (the recipe's, a stage's and the
    overrides') count as set for the settings-that-cannot-act checks, even at their default."""
    cfg = build_dataclass(Config, data)
    if smoke and cfg.warm_start.num_tasks > 0:
        cfg.warm_start.num_tasks = 8  # keep the stage, make it tiny
    if smoke and cfg.dpo.failure_tasks > 0:
        cfg.dpo.failure_tasks = 8
    estimator = ADVANTAGE_ESTIMATORS.get(cfg.algo.name)  # an unknown name fails in validate
    if not cfg.algo.loss_agg and estimator is not None:  # "" = the estimator's own
        cfg.algo.loss_agg = estimator.loss_agg or DEFAULT_LOSS_AGG
    validate(cfg, explicit=frozenset(_flat_keys(data)))
    return cfg


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """`base` with `change` applied section by section (nested mappings merge, values replace)."""
    out = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _stage_data(
    recipe: dict[str, Any],
    stage: Any,
    index: int,
    overrides: list[tuple[str, str]],
    smoke: bool,
) -> dict[str, Any]:
    """One stage's settings: the recipe, then the stage's sections, then the overrides (scope,
    text) that reach it; its run directory is the recipe's run directory / the stage name.

    An unscoped override acts in every stage, so one that changes a key the stage sets itself is
    a ConfigError: `warm_start.num_tasks=48` on a recipe whose RL stage says
    `warm_start: {num_tasks: 0}` would silently give that stage a warm start. The user says
    which: `STAGE:key=value` (that stage only) or `*:key=value` (every stage)."""
    if not isinstance(stage, dict) or not isinstance(stage.get("name"), str):
        raise ConfigError(f"stages[{index}] must be a mapping with a 'name' (got {stage!r})")
    name = stage["name"]
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"stages[{index}].name={name!r}: use letters, digits, - and _ only")
    if "stages" in stage or "recipe" in stage:
        raise ConfigError(f"stages[{index}] ({name}) cannot set 'stages' or 'recipe'")
    own = {k: v for k, v in stage.items() if k != "name"}
    data = _merge(recipe, own)
    own_keys = _flat_keys(own)
    for scope, text in overrides:
        if scope != "":
            continue
        changed = copy.deepcopy(data)
        _apply_overrides(changed, [text])
        clash = [k for k in own_keys if _get_dotted(changed, k) != _get_dotted(data, k)]
        if clash:
            raise ConfigError(
                f"override '{text}' would replace what stage '{name}' sets itself "
                f"({clash[0]}={_get_dotted(data, clash[0])!r}); say which: '{name}:{text}' for "
                f"that stage only, or '*:{text}' for every stage"
            )
    _apply_overrides(data, [text for scope, text in overrides if scope in ("", "*", name)])
    trainer = data.setdefault("trainer", {})
    trainer["run_name"] = f"{trainer.get('run_name') or data['recipe']}/{name}"
    data["description"] = f"{data.get('description', '')} [stage {index + 1}: {name}]".strip()
    return data

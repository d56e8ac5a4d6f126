"""Typed configuration: dataclasses with a docstring per field, YAML recipes, dotted overrides.

    cfg = load_config("recipes/search_qa_grpo.yaml", ["algo.name=rloo", "trainer.steps=10"])

Everything is validated once, at load (`validate`, in config_validate.py): an unknown key, a
value of the wrong type or a setting that makes no sense for the chosen algorithm raises
`ConfigError` naming the key. The YAML/override machinery lives in config_parse.py. The
sections of the generation side (model, env, rollout, vllm, ray) are in config_rollout.py, the
algorithm sections (algo, gigpo, filters) in config_algo.py; all are re-exported from here.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config.algo import AlgoConfig, FilterConfig, GigpoConfig
from agentic_rl.config.parse import (
    DEFAULT_RECIPE,
    ConfigError,
    build_dataclass,
    parse_override,
    recipe_dirs,
    resolve_recipe,
    set_dotted,
)
from agentic_rl.config.rollout import EnvConfig, ModelConfig, RayConfig, RolloutConfig, VLLMConfig
from agentic_rl.config.validate import (
    ADVANTAGE_ESTIMATORS,
    ANCHORED_ENVS,
    CHAT_FORMATS,
    DTYPES,
    ENV_NAMES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    ROLLOUT_MODES,
    validate,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ANCHORED_ENVS",
    "CHAT_FORMATS",
    "DEFAULT_RECIPE",
    "DTYPES",
    "ENV_NAMES",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "ROLLOUT_MODES",
    "SMOKE_OVERRIDES",
    "AlgoConfig",
    "Config",
    "ConfigError",
    "DPOConfig",
    "EnvConfig",
    "FilterConfig",
    "GigpoConfig",
    "LearnerConfig",
    "ModelConfig",
    "OptimConfig",
    "RayConfig",
    "RolloutConfig",
    "TrainerConfig",
    "VLLMConfig",
    "WarmStartConfig",
    "load_config",
    "parse_override",
    "recipe_dirs",
    "resolve_recipe",
    "validate",
]


@dataclass
class OptimConfig:
    lr: float = 5e-6
    """AdamW learning rate for RL."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.999
    """AdamW beta2."""
    warmup_steps: int = 0
    """Linear learning-rate warmup steps."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""
    micro_batch_size: int = 8
    """Sequences per forward/backward (RL update and warm start); gradients accumulate over
    the batch."""


@dataclass
class WarmStartConfig:
    num_tasks: int = 0
    """Scripted-expert episodes for a supervised warm start before RL; 0 disables it."""
    epochs: int = 1
    """Passes over the expert episodes."""
    lr: float = 1e-4
    """Learning rate of the warm start."""
    batch_size: int = 8
    """Episodes per warm-start optimiser step (run in micro-batches of optim.micro_batch_size)."""


@dataclass
class LearnerConfig:
    """Where the policy update runs: in this process, or sharded over processes with FSDP2."""

    strategy: str = "single"
    """"single": this process holds the whole model. "fsdp2": one process per device under
    torchrun (`torchrun --nproc_per_node=N -m agentic_rl.cli train RECIPE learner.strategy=fsdp2`)
    on gloo (CPU) or NCCL (GPU); the policy, reference and value head are sharded with torch
    FSDP2, each process plays its share of every rollout batch on a full copy of the weights
    (synced after each update) and trains on its share of the batch; sharded checkpoints
    (torch.distributed.checkpoint) resume only with the same number of processes.
    Gradient accumulation: each process runs its rows in micro-batches of
    optim.micro_batch_size sequences and steps once per batch, as in one process."""
    mixed_precision: str = "no"
    """"bf16": forward and backward passes compute in bfloat16 over float32 master weights,
    gradients and optimizer state (needs model.dtype=float32): torch.autocast in one process
    (CPU or GPU; 2.8x faster forward+backward on a CPU with AVX512-BF16, measured), FSDP2's
    mixed precision with float32 gradient reduction under fsdp2 (GPU only). "no": model.dtype."""
    defer_grad_sync: bool = False
    """fsdp2: reduce gradients across processes once, after the last micro-batch, instead of
    after every micro-batch: less communication, but each process holds full-size gradients
    until the optimiser step."""


@dataclass
class DPOConfig:
    """`agentic-rl dpo`: preference training on trajectory pairs (Rafailov et al. 2023)."""

    beta: float = 0.1
    """Strength of the implicit KL to the reference: loss = -log sigmoid(beta * margin)."""
    lr: float = 1e-6
    """AdamW learning rate."""
    epochs: int = 1
    """Passes over the pairs."""
    batch_size: int = 4
    """Pairs per optimiser step."""


@dataclass
class TrainerConfig:
    steps: int = 40
    """RL steps (one rollout batch and one update each)."""
    seed: int = 0
    """Seed of sampling and task order; same seed and config give the same numbers on CPU."""
    eval_every: int = 0
    """Evaluate on the held-out tasks every k steps (0: only before and after training)."""
    eval_before: bool = True
    """Evaluate the untrained (and the warm-started) model before RL."""
    save_every: int = 10
    """Checkpoint every k steps (and at the end)."""
    keep_last: int = 2
    """Checkpoints kept on disk."""
    out_dir: str = "runs"
    """Runs go to OUT_DIR/RUN_NAME."""
    run_name: str = ""
    """Run directory name; default: the recipe name."""
    resume: bool = True
    """Continue from the run directory's last checkpoint if there is one."""
    max_minutes: float = 0.0
    """Wall-clock budget for the RL steps (0: none); training stops early, saves and evaluates."""
    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    progress: bool = True
    """Show a progress bar (on a terminal) or one line per step."""
    export_model: bool = False
    """At the end, also write the policy as a Hugging Face model dir (RUN_DIR/model),
    loadable with model.name=DIR; multi-stage recipes set it to chain their stages."""


@dataclass
class Config:
    recipe: str = "default"
    """Recipe name (used for the run directory)."""
    description: str = ""
    """One line shown by `agentic-rl recipes`."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    gigpo: GigpoConfig = field(default_factory=GigpoConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    stages: list[dict[str, Any]] = field(default_factory=list)
    """Multi-stage recipes (e.g. SFT then RL, or two RL stages with different rewards): each
    entry is `{name: ..., <sections to change>}` over this recipe's settings; stage k + 1
    starts from stage k's final weights. Filled at load with each stage's complete, validated
    settings (recipe, then the stage, then --smoke, then command-line overrides)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    overrides = (_smoke_overrides(data, smoke_settings) if smoke else []) + list(overrides or [])
    resolved = [_stage_data(data, stage, i, overrides, smoke) for i, stage in enumerate(stages)]
    names = [stage["trainer"]["run_name"] for stage in resolved]
    if len(set(names)) != len(names):
        raise ConfigError(f"stage names must be distinct, got {[s['name'] for s in stages]}")
    _apply_overrides(data, overrides)
    cfg = _build(data, smoke)
    cfg.stages = [_build(stage, smoke).to_dict() for stage in resolved]
    return cfg


def _smoke_overrides(recipe: dict[str, Any], settings: Any = None) -> list[str]:
    """SMOKE_OVERRIDES for `recipe`. A recipe with a warm start keeps its own token budgets: its
    scripted expert's turns (a code block, a JSON tool call, an edit) must fit them, or every
    demonstration is cut short and the warm start has nothing to train on. The recipe's own
    `smoke:` mapping ({dotted key: value}, e.g. the turns a multi-hop expert needs) comes last."""
    if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
        raise ConfigError(f"smoke: must map dotted keys to values, got {settings!r}")
    extra = [f"{key}={json.dumps(value)}" for key, value in settings.items()]
    if not (recipe.get("warm_start") or {}).get("num_tasks"):
        return list(SMOKE_OVERRIDES) + extra
    budgets = ("rollout.max_tokens_per_turn=", "rollout.max_total_tokens=")
    return [text for text in SMOKE_OVERRIDES if not text.startswith(budgets)] + extra


def _apply_overrides(data: dict[str, Any], overrides: list[str]) -> None:
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value)


def _build(data: dict[str, Any], smoke: bool) -> Config:
    cfg = build_dataclass(Config, data)
    if smoke and cfg.warm_start.num_tasks > 0:
        cfg.warm_start.num_tasks = 8  # keep the stage, make it tiny
    validate(cfg)
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
    recipe: dict[str, Any], stage: Any, index: int, overrides: list[str], smoke: bool
) -> dict[str, Any]:
    """One stage's settings: the recipe, then the stage's sections, then the overrides; its run
    directory is the recipe's run directory / the stage name."""
    if not isinstance(stage, dict) or not isinstance(stage.get("name"), str):
        raise ConfigError(f"stages[{index}] must be a mapping with a 'name' (got {stage!r})")
    name = stage["name"]
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"stages[{index}].name={name!r}: use letters, digits, - and _ only")
    if "stages" in stage or "recipe" in stage:
        raise ConfigError(f"stages[{index}] ({name}) cannot set 'stages' or 'recipe'")
    data = _merge(recipe, {k: v for k, v in stage.items() if k != "name"})
    _apply_overrides(data, overrides)
    trainer = data.setdefault("trainer", {})
    trainer["run_name"] = f"{trainer.get('run_name') or data['recipe']}/{name}"
    data["description"] = f"{data.get('description', '')} [stage {index + 1}: {name}]".strip()
    return data

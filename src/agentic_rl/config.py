"""Typed configuration: dataclasses with a docstring per field, YAML recipes, dotted overrides.

    cfg = load_config("recipes/search_qa_grpo.yaml", ["algo.name=rloo", "trainer.steps=10"])

Everything is validated once, at load: an unknown key, a value of the wrong type or a setting
that makes no sense for the chosen algorithm raises `ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the key."""


@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """"smollm2-135m" (the bundled SmolLM2-135M-Instruct), "tiny" (a randomly initialised
    2-layer model with the bundled tokenizer, for tests), or a local Hugging Face model dir."""
    dtype: str = "float32"
    """float32 or bfloat16. On the 2-core CPU fp32 was measured faster than bf16."""
    logprob_chunk_size: int = 64
    """Sequence positions per chunk when computing token logprobs; the [B, T, vocab] logits
    tensor is never materialised for the whole batch."""
    cache_dir: str = ""
    """Where the dequantised bundled model is cached; default ~/.cache/agentic_rl."""


@dataclass
class EnvConfig:
    name: str = "search_qa"
    """Environment: "search_qa" or "calculator"."""
    num_train_tasks: int = 2000
    """Training tasks generated from `seed` (sampled with replacement per step)."""
    num_eval_tasks: int = 100
    """Held-out tasks (disjoint from training) evaluated greedily before and after training."""
    seed: int = 0
    """Seed of the task generators (and of the search corpus)."""
    topk: int = 3
    """Documents returned per search (search_qa only)."""
    format_penalty: float = 0.1
    """Reward subtracted for a malformed action or a turn without any action."""
    tool_timeout_s: float = 10.0
    """A tool call running longer than this returns an error observation."""


@dataclass
class RolloutConfig:
    tasks_per_step: int = 2
    """B: tasks per training step."""
    group_size: int = 8
    """G: samples per task (the GRPO group)."""
    max_turns: int = 4
    """Model turns per episode; the episode is truncated after the last one."""
    max_tokens_per_turn: int = 64
    """New tokens per model turn."""
    max_total_tokens: int = 512
    """Budget of tokens after the prompt (model turns and observations together)."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (evaluation is greedy)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    chat_format: str = "tags"
    """Action format: "tags" (Search-R1 style <search>q</search>, results inline) or "hermes"
    (<tool_call>{json}</tool_call>, results in a tool turn)."""
    eval_batch_size: int = 50
    """Episodes decoded together during evaluation."""


@dataclass
class AlgoConfig:
    name: str = "grpo"
    """Advantage estimator: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo (GAE
    with a value head)."""
    loss_agg: str = "seq-mean-token-mean"
    """Loss aggregation: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm."""
    clip_low: float = 0.2
    """PPO ratio clip below 1 (1 - clip_low)."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (1 + clip_high); DAPO's clip-higher uses 0.28."""
    dual_clip: float = 0.0
    """Dual-clip constant c (e.g. 3.0) for negative advantages; 0 disables it."""
    kl_coef: float = 0.0
    """Weight of the KL to the frozen reference; 0 means no reference model is loaded."""
    kl_estimator: str = "k3"
    """KL estimator: k1, k2, k3 (k3 = the 'low-variance' estimator used by GRPO)."""
    kl_in_reward: bool = False
    """Apply the KL as a per-token reward penalty instead of a loss term."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (subtracted from the loss)."""
    gamma: float = 1.0
    """Discount for GAE / REINFORCE++ returns."""
    lam: float = 1.0
    """GAE lambda."""
    value_coef: float = 0.5
    """Value loss weight (ppo only)."""
    value_clip: float = 0.2
    """Value clipping range (ppo only)."""
    epochs: int = 1
    """Optimisation passes over each batch; >1 makes the update off-policy (old logprobs are
    recomputed once before the first pass)."""


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
    """Sequences per forward/backward; gradients accumulate over the batch."""


@dataclass
class WarmStartConfig:
    num_tasks: int = 0
    """Scripted-expert episodes for a supervised warm start before RL; 0 disables it."""
    epochs: int = 1
    """Passes over the expert episodes."""
    lr: float = 1e-4
    """Learning rate of the warm start."""
    batch_size: int = 8
    """Episodes per warm-start optimiser step."""


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
    optim: OptimConfig = field(default_factory=OptimConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k2", "k3")
ENV_NAMES = ("search_qa", "calculator")
CHAT_FORMATS = ("tags", "hermes")
DTYPES = ("float32", "bfloat16")

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


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and mildly coerce, int -> float) a YAML value against a field's annotation."""
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return _build(tp, value, key + ".")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} is not a valid {tp}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _build(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    hints = _field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(
            f"unknown config key '{prefix}{unknown[0]}' (valid keys here: {', '.join(names)})"
        )
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    return cls(**kwargs)


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override '{dotted}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`algo.clip_high=0.28` -> ("algo.clip_high", 0.28); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{text}' has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override '{text}': cannot parse value: {err}") from err
    return key, value


def recipe_dirs() -> list[Path]:
    """Where recipe names are looked up: $AGENTIC_RL_RECIPES, ./recipes, the project's recipes/."""
    dirs = []
    if os.environ.get("AGENTIC_RL_RECIPES"):
        dirs.append(Path(os.environ["AGENTIC_RL_RECIPES"]))
    dirs.append(Path.cwd() / "recipes")
    dirs.append(Path(__file__).resolve().parents[2] / "recipes")
    return dirs


DEFAULT_RECIPE = "search_qa_grpo"


def resolve_recipe(name_or_path: str | None) -> Path:
    """A recipe file path, or a recipe name looked up in `recipe_dirs()`."""
    name = name_or_path or DEFAULT_RECIPE
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise ConfigError(f"recipe file not found: {path}")
        return path
    for folder in recipe_dirs():
        candidate = folder / f"{name}.yaml"
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for d in recipe_dirs() if d.is_dir() for p in d.glob("*.yaml")})
    raise ConfigError(f"unknown recipe '{name}' (known: {', '.join(known) or 'none found'})")


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
    for text in (SMOKE_OVERRIDES if smoke else []) + list(overrides or []):
        key, value = parse_override(text)
        _set_dotted(data, key, value)
    cfg = _build(Config, data)
    if smoke and cfg.warm_start.num_tasks > 0:
        cfg.warm_start.num_tasks = 8  # keep the stage, make it tiny
    validate(cfg)
    return cfg


def _check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{key}: '{value}' is not one of {', '.join(choices)}")


def _check_positive(cfg: Config, keys: list[str], allow_zero: bool = False) -> None:
    for key in keys:
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{key} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


def validate(cfg: Config) -> None:
    """Reject values that are invalid or would silently do nothing."""
    _check_choice("algo.name", cfg.algo.name, ADVANTAGE_ESTIMATORS)
    _check_choice("algo.loss_agg", cfg.algo.loss_agg, LOSS_AGGREGATIONS)
    _check_choice("algo.kl_estimator", cfg.algo.kl_estimator, KL_ESTIMATORS)
    _check_choice("env.name", cfg.env.name, ENV_NAMES)
    _check_choice("rollout.chat_format", cfg.rollout.chat_format, CHAT_FORMATS)
    _check_choice("model.dtype", cfg.model.dtype, DTYPES)
    _check_positive(
        cfg,
        [
            "rollout.tasks_per_step",
            "rollout.group_size",
            "rollout.max_turns",
            "rollout.max_tokens_per_turn",
            "rollout.max_total_tokens",
            "rollout.eval_batch_size",
            "optim.micro_batch_size",
            "model.logprob_chunk_size",
            "algo.epochs",
            "env.num_eval_tasks",
            "env.num_train_tasks",
            "env.topk",
            "warm_start.epochs",
            "warm_start.batch_size",
        ],
    )
    _check_positive(
        cfg,
        [
            "trainer.steps",
            "trainer.eval_every",
            "trainer.save_every",
            "trainer.max_minutes",
            "optim.lr",
            "optim.warmup_steps",
            "optim.max_grad_norm",
            "algo.kl_coef",
            "algo.entropy_coef",
            "algo.dual_clip",
            "rollout.temperature",
            "warm_start.num_tasks",
            "env.format_penalty",
        ],
        allow_zero=True,
    )
    if cfg.env.name != "search_qa" and cfg.env.topk != EnvConfig.topk:
        raise ConfigError(f"env.topk only applies to search_qa, not env.name={cfg.env.name}")
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {cfg.rollout.top_p}")
    if not 0 <= cfg.algo.clip_low < 1 or cfg.algo.clip_high < 0:
        raise ConfigError("algo.clip_low must be in [0, 1) and algo.clip_high >= 0")
    if 0 < cfg.algo.dual_clip <= 1:
        raise ConfigError(
            f"algo.dual_clip must be > 1 (typically 3.0) or 0, got {cfg.algo.dual_clip}"
        )
    if not 0 < cfg.algo.gamma <= 1 or not 0 <= cfg.algo.lam <= 1:
        raise ConfigError("algo.gamma must be in (0, 1] and algo.lam in [0, 1]")
    if cfg.algo.kl_in_reward and cfg.algo.kl_coef == 0:
        raise ConfigError("algo.kl_in_reward=true does nothing with algo.kl_coef=0")
    if cfg.algo.kl_in_reward and cfg.algo.name not in ("reinforce_pp", "ppo"):
        raise ConfigError(
            f"algo.kl_in_reward needs a token-level estimator (reinforce_pp or ppo), "
            f"not algo.name={cfg.algo.name}; use the KL loss term instead"
        )
    if cfg.algo.name in ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline") and (
        cfg.rollout.group_size < 2
    ):
        raise ConfigError(
            f"algo.name={cfg.algo.name} compares samples of a group: "
            "rollout.group_size must be >= 2"
        )
    if cfg.warm_start.num_tasks == 0 and cfg.warm_start.epochs != 1:
        raise ConfigError("warm_start.epochs is set but warm_start.num_tasks=0 disables it")
    if cfg.rollout.max_tokens_per_turn > cfg.rollout.max_total_tokens:
        raise ConfigError("rollout.max_tokens_per_turn exceeds rollout.max_total_tokens")

"""Typed configuration: dataclasses with a docstring per field, YAML recipes, dotted overrides.

    cfg = load_config("recipes/search_qa_grpo.yaml", ["algo.name=rloo", "trainer.steps=10"])

Everything is validated once, at load (`validate`, in config_validate.py): an unknown key, a
value of the wrong type or a setting that makes no sense for the chosen algorithm raises
`ConfigError` naming the key. The YAML/override machinery lives in config_parse.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config_parse import (
    DEFAULT_RECIPE,
    ConfigError,
    build_dataclass,
    parse_override,
    recipe_dirs,
    resolve_recipe,
    set_dotted,
)
from agentic_rl.config_validate import (
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
    "Config",
    "ConfigError",
    "load_config",
    "parse_override",
    "recipe_dirs",
    "resolve_recipe",
    "validate",
]


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
    """Environment: "search_qa", "multihop_qa" (two-hop search), "calculator", "math_tool"
    (python sandbox), "math_text" (no tools), "code_repair" or "gridworld" (multi-step, GiGPO)."""
    num_train_tasks: int = 2000
    """Training tasks generated from `seed` (sampled with replacement per step)."""
    num_eval_tasks: int = 100
    """Held-out tasks (disjoint from training) evaluated greedily before and after training."""
    seed: int = 0
    """Seed of the task generators (and of the search corpus)."""
    topk: int = 3
    """Documents returned per search (envs with a search tool)."""
    format_penalty: float = 0.1
    """Reward subtracted for a malformed action or a turn without any action."""
    tool_timeout_s: float = 10.0
    """A tool call running longer than this returns an error observation."""
    options: dict[str, Any] = field(default_factory=dict)
    """Env-specific settings: each key goes to the env constructor and/or the task generator
    parameter of that name (e.g. {reward: f1, num_entities: 400}); unknown keys fail at load."""


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
    mode: str = "episode"
    """"episode": one training sample per episode, the context grows turn by turn. "step"
    (GiGPO, verl-agent): every env step is its own training sample whose context is the prompt
    plus the last `history_window` steps, so the context stays flat over long episodes; the
    step's sampled tokens are its only loss-mask-1 tokens."""
    history_window: int = 2
    """Step mode: past steps (model turn + observation) kept in each step's context."""


@dataclass
class AlgoConfig:
    name: str = "grpo"
    """Advantage estimator: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, ppo (GAE
    with a value head), gigpo (step-wise; see the `gigpo` section), trr_pp (Absolute Zero's
    REINFORCE++ with one baseline per task type x role)."""
    policy_loss: str = "ppo"
    """"ppo": token-level clipped ratio (clip_low/clip_high, dual_clip). "gspo": GSPO's
    sequence-level ratio exp(mean_t log pi/pi_old) with its own clip range (gspo_clip_*)."""
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
    gspo_clip_low: float = 3e-4
    """GSPO: sequence-ratio clip below 1 (Zheng et al. 2025 use 3e-4)."""
    gspo_clip_high: float = 4e-4
    """GSPO: sequence-ratio clip above 1 (Zheng et al. 2025 use 4e-4)."""
    trr_type_field: str = "task_type"
    """TRR++: the Task.fields key holding the task type (e.g. "template" for calculator)."""
    trr_role_field: str = "role"
    """TRR++: the Task.fields key holding the role (propose / solve); "" = a single role."""


@dataclass
class GigpoConfig:
    """GiGPO (Feng et al. 2025): A = A_episode + omega * A_step over anchor-state groups."""

    omega: float = 1.0
    """Weight of the step-level advantage."""
    gamma: float = 0.95
    """Discount of the step returns R_t = sum_k gamma^(k-t) r_k."""
    norm: str = "mean_std_norm"
    """"mean_std_norm" (divide by the group std) or "mean_norm" (only subtract the mean)."""
    similarity_threshold: float = 1.0
    """Anchors join a step group when difflib's ratio to its first member is >= this; 1.0 =
    identical anchors only (verl-agent's similarity variant uses 0.95)."""


@dataclass
class FilterConfig:
    """Batch filters between rollout and advantages (DAPO, RoC, StarPO-S, TTRL)."""

    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and generate more until the batch holds
    rollout.tasks_per_step groups."""
    max_gen_batches: int = 10
    """Dynamic sampling: rollout batches per step before giving up with an error."""
    overlong_filter: bool = False
    """DAPO: truncated episodes (a token or turn budget cut them) get loss mask 0."""
    overlong_buffer: int = 0
    """DAPO soft overlong penalty: reward += 0 up to max_total_tokens - buffer response tokens,
    then linearly down to -1 at max_total_tokens; 0 disables it."""
    variance_filter_keep: float = 1.0
    """StarPO-S (RAGEN): keep this fraction of groups, highest reward std first; 1.0 = off."""
    roc: bool = False
    """GRPO-RoC (rStar2-Agent): sample roc_oversample x G per task, drop equal-reward groups,
    keep G with class proportions, cleanest positives (tool errors, answer format) first."""
    roc_oversample: int = 2
    """RoC: samples per task = roc_oversample x rollout.group_size."""
    roc_min_per_class: int = 2
    """RoC: positives and negatives each keep at least this many (when available)."""
    ttrl_vote_samples: int = 0
    """TTRL: sample this many answers per task (N), take the majority answer as the label,
    reward 1 for agreeing with it, train on the first rollout.group_size (M); 0 = off."""


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
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

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
    for text in (SMOKE_OVERRIDES if smoke else []) + list(overrides or []):
        key, value = parse_override(text)
        set_dotted(data, key, value)
    cfg = build_dataclass(Config, data)
    if smoke and cfg.warm_start.num_tasks > 0:
        cfg.warm_start.num_tasks = 8  # keep the stage, make it tiny
    validate(cfg)
    return cfg

"""Typed configuration: dataclasses with a docstring per field, YAML recipes, dotted overrides.

    cfg = load_config("recipes/search_qa_grpo.yaml", ["algo.name=rloo", "trainer.steps=10"])

Everything is validated once, at load (`validate`, in config_validate.py): an unknown key, a
value of the wrong type or a setting that makes no sense for the chosen algorithm raises
`ConfigError` naming the key. The YAML/override machinery lives in config_parse.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
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
    share_prefix: bool = True
    """Learner passes run the leading tokens that all rows of a micro-batch share (a group's
    prompt) once and reuse their KV for every row: same numbers, the prompt's cost paid once
    instead of G times. Micro-batches are then formed group by group. Off under
    gradient_checkpointing and for PPO's value head, which need every position's state."""
    cache_dir: str = ""
    """Where the dequantised bundled model is cached; default ~/.cache/agentic_rl."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of storing them:
    activation memory drops from all layers to about one layer per micro-batch, for roughly a
    third more compute in the update (see bench/train_memory.py)."""
    lora_rank: int = 0
    """LoRA rank r (PEFT, extra `agentic-rl[peft]`); 0 = full fine-tuning. With r > 0 only the
    adapters train, the KL reference is the base model with the adapter switched off (no second
    copy), and checkpoints and weight syncs to the generator carry the adapter only."""
    lora_alpha: float = 16.0
    """LoRA scale numerator: the adapted layer computes W x + (lora_alpha / lora_rank) B A x."""
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    """Names of the linear layers that get adapters (matched as name suffixes); the default is
    every attention and MLP projection of Llama/Qwen/SmolLM-style models."""


@dataclass
class EnvConfig:
    name: str = "search_qa"
    """Environment: "search_qa", "multihop_qa" (two-hop search), "zerosearch_qa" (two-hop, an
    LLM-simulated search engine), "web_qa" (two-hop, web search + browsing), "calculator",
    "math_tool" (python sandbox), "math_text" (no tools), "math_multitool" (python +
    calculator, ARTIST's reward), "code_repair", "code_self_play" (Absolute Zero's propose /
    solve code tasks) or "gridworld" (multi-step, GiGPO)."""
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
    context_budget: int = 0
    """Episode mode, long horizons (ASearcher): the most tokens any turn is generated from
    (prompt + kept history). Older observations are cut, then dropped, to fit; the episode is
    then trained as segments, each turn in the exact context it saw (rollout/budgeted.py).
    0 = off: the context is the whole history."""
    context_keep_turns: int = 2
    """With context_budget: the latest turns (model turn + observation) kept whole when fitting,
    as long as they fit the budget."""
    context_target: int = 0
    """With context_budget: a cut fits the history into this many tokens (0 = context_budget);
    lower values leave room for a few turns before the next cut (fewer, longer segments)."""
    backend: str = "hf"
    """Generator engine: "hf" (transformers in this process, shares the learner's weights; CPU
    or GPU) or "vllm" (a vLLM engine on the GPU, extra `agentic-rl[vllm]`, settings in the
    `vllm` section; it receives the new weights after every update)."""
    mixed_precision: str = "no"
    """backend hf: "bf16" generates under torch.autocast(bfloat16) over the float32 weights
    (1.7x faster decoding on a CPU with AVX512-BF16, measured; sampled-token logprobs differ
    from float32 by ~0.03 nats on average, see bench/README.md); "no" computes in model.dtype."""
    train_on_observations: bool = False
    """Ablation only: put tool/retrieval observation tokens in the loss as if the policy had
    written them (Search-R1's "no retrieved-token masking" ablation). Off = the standard mask."""
    max_staleness: int = 0
    """Asynchronous rollouts (AReaL): 0 = synchronous (generate, then update, in turn). k > 0 =
    a rollout worker keeps generating while the learner updates, on samples from policy versions
    at most k updates old; stale tokens are corrected with decoupled PPO (algo.stale_is_cap)."""
    thinking_mode: str = "off"
    """Qwen3 thinking switch (rollout/think_budget.py): "off", "think" or "no_think" (the flag
    appended to the user message; no-think prompts are prefilled with an empty <think> block),
    or "both" (one mode per task, half and half)."""
    think_budget: int = 0
    """Qwen3 thinking budget: a turn's <think> block is cut after this many sampled tokens and
    `think_stop`'s phrase is inserted (loss mask 0) before the model answers; 0 = no budget."""
    think_stop: str = "qwen3"
    """Text inserted at the budget: "qwen3" (the report's "Considering the limited time by the
    user, ..." then </think>) or "short" (just </think>)."""


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
    stale_is_cap: float = 5.0
    """rollout.max_staleness > 0: each token's behaviour importance weight pi_prox / pi_behav
    (decoupled PPO) is truncated at this value, so very stale tokens cannot dominate."""
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
class VLLMConfig:
    """rollout.backend=vllm: the vLLM engine that generates the rollouts (GPU only)."""

    gpu_memory_utilization: float = 0.5
    """Fraction of the GPU's memory vLLM takes for weights and KV cache; the rest is left for
    the learner on the same GPU."""
    dtype: str = "auto"
    """vLLM weight/activation dtype: auto (the model config's), bfloat16, float16 or float32."""
    max_model_len: int = 0
    """Longest context (prompt + completion) in tokens the engine accepts; 0 = the model's own
    limit. Lower values leave more memory for the KV cache."""
    sleep_level: int = 0
    """Free the engine's GPU memory while the learner updates (vLLM sleep mode): 0 = never,
    1 = offload weights to CPU and drop the KV cache, 2 = drop both (the new weights are loaded
    right after the update; not with LoRA, whose base weights are never re-sent)."""
    enforce_eager: bool = False
    """Run without CUDA graphs: faster start-up, slower decoding (smoke runs, debugging)."""


@dataclass
class RayConfig:
    """Env and tool workers (and optionally the generator) on Ray actors (extra
    `agentic-rl[ray]`), so rollouts with slow tools spread over a cluster. The learner stays in
    the driver process."""

    enabled: bool = False
    """Run the envs (and their tools: retriever, sandbox...) on Ray actors."""
    address: str = ""
    """Cluster to join: "" starts a local one inside this process, "auto" joins the cluster this
    machine belongs to (`ray start`), "ray://HOST:10001" a remote one."""
    num_cpus: int = 0
    """Local cluster only: CPUs it may use (0 = every CPU of this machine)."""
    num_env_workers: int = 2
    """Env worker actors. Episodes are spread over them round-robin; their env steps (tool calls)
    run at the same time, one episode at a time per worker."""
    env_worker_cpus: float = 0.5
    """CPUs Ray reserves for each env worker (fractions allowed: tool calls mostly wait)."""
    max_episode_retries: int = 2
    """A worker lost mid-episode: the episode is replayed on a fresh worker (same reset seed, same
    actions, so its tokens do not change) up to this many times, then the run stops."""
    call_timeout_s: float = 120.0
    """An env call that has not returned after this long counts as a lost worker; keep it above
    env.tool_timeout_s."""
    generator_actor: bool = False
    """Generate in a Ray actor of its own (its own copy of the weights, sent after every update)
    placed with generator_cpus / generator_gpus, e.g. on a GPU node; off = in the driver."""
    generator_cpus: float = 1.0
    """CPUs Ray reserves for the generator actor."""
    generator_gpus: float = 0.0
    """GPUs Ray reserves for the generator actor (it moves its model to its GPU)."""


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
    (CPU or GPU; 2.5x faster forward+backward on a CPU with AVX512-BF16, measured), FSDP2's
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

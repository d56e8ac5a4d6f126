"""`validate(cfg)`: every rule that makes a loaded config fail, with a message naming the keys.

Two kinds of rules: values out of range, and combinations that would be silently ignored or can
never work (GSPO with token-level aggregation, GiGPO without step-wise rollouts on an env with
anchor states, dynamic sampling that can never fill a batch...). Called by `load.py` for
every config it builds; `validate` holds the order of the checks. The env rules (names, options,
data files, expert, reward function) are in validate_env.py, the turn-level estimators' in
validate_turns.py, distillation's in validate_distill.py, rollout.mode=memory's and the
multi-agent roles' in validate_roles.py, tree rollouts' in validate_tree.py, the update's
mini-batches and corrections in validate_update.py, the LoRA / generator-backend / learner rules
in validate_engines.py, the async and Ray rules in validate_scale.py, the shared checks
(`_check_choice`, `_unused`...) in checks.py.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from agentic_rl.algos.estimators import ADVANTAGE_ESTIMATORS, Estimator
from agentic_rl.algos.gigpo import GIGPO_NORMS
from agentic_rl.algos.losses import KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
from agentic_rl.config.algo import FILTER_METRICS
from agentic_rl.config.checks import (
    _check_choice,
    _check_positive,
    _default,
    _get,
    _unused,
    check_trainer,
)
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import max_generated_tokens
from agentic_rl.config.validate_distill import validate_distill
from agentic_rl.config.validate_engines import validate_engines
from agentic_rl.config.validate_env import validate_env
from agentic_rl.config.validate_roles import validate_memory_mode, validate_roles
from agentic_rl.config.validate_scale import validate_distributed
from agentic_rl.config.validate_tree import validate_tree
from agentic_rl.config.validate_turns import validate_turns
from agentic_rl.config.validate_update import validate_update
from agentic_rl.formats.registry import CHAT_FORMATS
from agentic_rl.model.load import takes_images, vision_family
from agentic_rl.model.vision import IDEFICS3_FAMILIES

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

ROLLOUT_MODES = ("episode", "step", "memory")
ROLLOUT_SCHEMES = ("sample", "self_play")
DTYPES = ("float32", "bfloat16")


def validate(cfg: Config, explicit: Collection[str] = ()) -> None:
    """Reject values that are invalid or would silently do nothing. `explicit`: the dotted keys
    the recipe or the command line set (config/load.py); a setting that cannot act is refused
    when it is named there, even at its default value."""
    _check_choice("algo.name", cfg.algo.name, tuple(ADVANTAGE_ESTIMATORS))
    _check_choice("algo.loss_agg", cfg.algo.loss_agg, tuple(LOSS_AGGREGATIONS))
    _check_choice("algo.policy_loss", cfg.algo.policy_loss, tuple(POLICY_LOSSES))
    _check_choice("algo.kl_estimator", cfg.algo.kl_estimator, tuple(KL_ESTIMATORS))
    _check_choice("rollout.chat_format", cfg.rollout.chat_format, tuple(CHAT_FORMATS))
    _check_choice("rollout.mode", cfg.rollout.mode, ROLLOUT_MODES)
    _check_choice("gigpo.norm", cfg.gigpo.norm, GIGPO_NORMS)
    _check_choice("planner.world_model", cfg.planner.world_model, ("llm", "exact"))
    _check_choice("planner.cum_reward", cfg.planner.cum_reward, ("mean", "sum"))
    _check_choice("planner.calc_q", cfg.planner.calc_q, ("mean", "max"))
    _check_choice("knownself.phase", cfg.knownself.phase, ("all", "sft_only", "sft", "dpo"))
    if not 0 <= cfg.knownself.sft_tasks <= cfg.knownself.num_tasks:
        raise ConfigError(
            f"knownself.sft_tasks must be in 0..knownself.num_tasks ({cfg.knownself.num_tasks}), "
            f"got {cfg.knownself.sft_tasks}"
        )
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
            "dpo.beta",
            "dpo.epochs",
            "dpo.batch_size",
            "planner.iterations",
            "planner.max_state_tokens",
            "planner.cot_max_tokens",
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
            "optim.micro_batch_tokens",
            "optim.warmup_steps",
            "optim.max_grad_norm",
            "algo.kl_coef",
            "algo.entropy_coef",
            "algo.dual_clip",
            "rollout.temperature",
            "rollout.history_window",
            "rollout.infra_retries",
            "rollout.infra_retry_wait_s",
            "rollout.env_workers",
            "warm_start.num_tasks",
            "dpo.failure_tasks",
            "env.format_penalty",
            "gigpo.omega",
            "filters.overlong_buffer",
            "filters.ttrl_vote_samples",
            "dpo.lr",
        ],
        allow_zero=True,
    )
    validate_env(cfg)
    if cfg.rollout.train_on_observations and (cfg.algo.epochs > 1 or cfg.algo.kl_in_reward):
        raise ConfigError(
            "rollout.train_on_observations needs algo.epochs=1 and algo.kl_in_reward=false: "
            "observation tokens have no behaviour logprobs to form a ratio or a KL reward with"
        )
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {cfg.rollout.top_p}")
    if not 0 <= cfg.rollout.max_infra_drop_fraction <= 1:
        raise ConfigError(
            "rollout.max_infra_drop_fraction must be in [0, 1], got "
            f"{cfg.rollout.max_infra_drop_fraction}"
        )
    _validate_ppo_terms(cfg, explicit)
    validate_turns(cfg, explicit)
    if cfg.warm_start.num_tasks == 0 and cfg.warm_start.epochs != 1:
        raise ConfigError("warm_start.epochs is set but warm_start.num_tasks=0 disables it")
    if not 0 <= cfg.warm_start.recovery_fraction <= 1:
        raise ConfigError(
            "warm_start.recovery_fraction must be in [0, 1], got "
            f"{cfg.warm_start.recovery_fraction}"
        )
    if cfg.warm_start.num_tasks == 0 and cfg.warm_start.recovery_fraction:
        raise ConfigError(
            "warm_start.recovery_fraction is set but warm_start.num_tasks=0 disables the warm start"
        )
    if cfg.rollout.max_tokens_per_turn > cfg.rollout.max_total_tokens:
        raise ConfigError("rollout.max_tokens_per_turn exceeds rollout.max_total_tokens")
    _validate_policy_loss(cfg)
    validate_distill(cfg)
    _validate_step_mode(cfg)
    _validate_context_budget(cfg)
    validate_tree(cfg, explicit)
    _validate_filters(cfg)
    _validate_thinking(cfg)
    _validate_self_play(cfg)
    validate_update(cfg)
    check_trainer(cfg, explicit)
    validate_engines(cfg)
    _validate_vllm_images(cfg)
    validate_distributed(cfg)


def _validate_vllm_images(cfg: Config) -> None:
    """vllm.max_images_per_prompt: > 0 exactly when the policy takes images. Here, not in
    validate_engines.py with the other vllm keys, because it asks the model layer
    (`takes_images`), which sits above validate_engines."""
    if cfg.rollout.backend != "vllm":
        return  # validate_engines refuses the key as unused
    limit = cfg.vllm.max_images_per_prompt
    if limit < 0:
        raise ConfigError(f"vllm.max_images_per_prompt must be >= 0, got {limit}")
    vision = takes_images(cfg.model.name)
    if vision and limit == 0:
        raise ConfigError(
            f"model.name={cfg.model.name} is a vision-language model but vllm.max_images_per_prompt"
            "=0 starts a text-only engine: set vllm.max_images_per_prompt to the most pictures one "
            "prompt holds (every picture its episode has shown so far, e.g. rollout.max_turns + 1 "
            "for an env that shows one per observation)"
        )
    if vision is False and limit > 0:
        raise ConfigError(
            f"vllm.max_images_per_prompt is set but does nothing: model.name={cfg.model.name} "
            "is a text-only model"
        )
    family = vision_family(cfg.model.name) if vision else None
    if family is not None and family not in IDEFICS3_FAMILIES:
        raise ConfigError(
            f"model.name={cfg.model.name} is a {family} model: rollout.backend=vllm takes the "
            f"pictures of {', '.join(IDEFICS3_FAMILIES)} models only (Qwen2-VL's sized "
            "placeholders and M-RoPE positions are built on the hf backend): use rollout.backend=hf"
        )


def _estimator(cfg: Config) -> Estimator:
    """The table entry of algo.name (checked first in `validate`)."""
    return ADVANTAGE_ESTIMATORS[cfg.algo.name]


def _names(has: Callable[[Estimator], bool]) -> str:
    """The estimators with a property, for messages: "grpo, dr_grpo, rloo"."""
    return ", ".join(name for name, e in ADVANTAGE_ESTIMATORS.items() if has(e))


def _validate_ppo_terms(cfg: Config, explicit: Collection[str] = ()) -> None:
    algo = cfg.algo
    if not 0 <= algo.clip_low < 1 or algo.clip_high < 0:
        raise ConfigError("algo.clip_low must be in [0, 1) and algo.clip_high >= 0")
    if 0 < algo.dual_clip <= 1:
        raise ConfigError(f"algo.dual_clip must be > 1 (typically 3.0) or 0, got {algo.dual_clip}")
    if not 0 < algo.gamma <= 1 or not 0 <= algo.lam <= 1:
        raise ConfigError("algo.gamma must be in (0, 1] and algo.lam in [0, 1]")
    if algo.kl_in_reward and algo.kl_coef == 0:
        raise ConfigError("algo.kl_in_reward=true does nothing with algo.kl_coef=0")
    estimator = _estimator(cfg)
    if algo.kl_in_reward and not estimator.kl_reward:
        raise ConfigError(
            f"algo.kl_in_reward needs an estimator that takes the KL as a reward, per token or "
            f"per turn ({_names(lambda e: e.kl_reward)}), not algo.name={algo.name}; use the KL "
            "loss term instead"
        )
    if not estimator.needs_value_head:
        _unused(
            cfg,
            ["algo.lam", "algo.value_coef", "algo.value_clip"],
            f"algo.name={algo.name} has no critic (GAE and the value loss are "
            f"{_names(lambda e: e.needs_value_head)}'s)",
            explicit,
        )
    if not estimator.discounted:
        _unused(
            cfg,
            ["algo.gamma"],
            f"algo.name={algo.name} does not discount token returns (only "
            f"{_names(lambda e: e.discounted)} do)",
            explicit,
        )
    if algo.kl_coef == 0:
        _unused(cfg, ["algo.kl_estimator"], "algo.kl_coef=0: no KL is computed", explicit)
    if estimator.needs_groups and cfg.rollout.group_size < 2:
        raise ConfigError(
            f"algo.name={algo.name} compares samples of a group: rollout.group_size must be >= 2"
        )
    _validate_critic(cfg)
    if not estimator.task_buckets:
        _unused(
            cfg,
            ["algo.trr_type_field", "algo.trr_role_field"],
            f"algo.name={algo.name} has no task-type x role buckets (trr_pp has)",
        )
    elif not algo.trr_type_field:
        raise ConfigError(
            f"algo.trr_type_field must name a Task.fields key for algo.name={algo.name}"
        )


def _validate_critic(cfg: Config) -> None:
    """algo.critic / algo.critic_lr (model/critic.py): ppo only; a separate critic copies the
    full backbone, which a LoRA policy's adapters-only checkpoints and syncs do not cover."""
    algo = cfg.algo
    _check_choice("algo.critic", algo.critic, ("shared", "separate"))
    has_critic = _estimator(cfg).needs_value_head
    if not has_critic:
        _unused(cfg, ["algo.critic", "algo.critic_lr"], f"algo.name={algo.name} has no critic")
    if algo.critic_lr < 0:
        raise ConfigError(f"algo.critic_lr must be >= 0 (0 = optim.lr), got {algo.critic_lr}")
    if has_critic and algo.critic == "separate" and cfg.model.lora_rank > 0:
        raise ConfigError(
            "algo.critic=separate with model.lora_rank > 0 is not supported: the critic would be "
            "a second full-size trainable copy of the model, checkpointed whole; use "
            "algo.critic=shared (a value head on the LoRA policy's states) or model.lora_rank=0"
        )


def _validate_policy_loss(cfg: Config) -> None:
    """The chosen loss's sequence-level needs, its knobs' ranges, and no knob of another loss
    (POLICY_LOSSES[...].knobs: a knob the chosen loss does not read would do nothing)."""
    algo = cfg.algo
    spec = POLICY_LOSSES[algo.policy_loss]
    if spec.sequence_level:
        if algo.loss_agg != "seq-mean-token-mean":
            raise ConfigError(
                f"algo.policy_loss={algo.policy_loss} has one ratio per sequence, so the loss is "
                "a mean over sequences: algo.loss_agg must be seq-mean-token-mean, not "
                f"{algo.loss_agg}"
            )
        if not _estimator(cfg).sequence_level:
            raise ConfigError(
                f"algo.policy_loss={algo.policy_loss} needs one advantage per sequence; "
                f"algo.name={algo.name} gives token-level advantages (use one of "
                f"{_names(lambda e: e.sequence_level)})"
            )
    reads = {field for _, field in spec.knobs}
    if algo.dual_clip and "dual_clip" not in reads:
        raise ConfigError(
            f"algo.dual_clip applies to the token-level ppo loss, not {algo.policy_loss}"
        )
    others = sorted(
        {field for s in POLICY_LOSSES.values() for _, field in s.knobs} - reads - {"dual_clip"}
    )
    for field in others:
        owners = [n for n, s in POLICY_LOSSES.items() if field in {f for _, f in s.knobs}]
        _unused(
            cfg,
            [f"algo.{field}"],
            f"algo.policy_loss={algo.policy_loss} does not read it (a knob of {', '.join(owners)})",
        )
    if not 0 <= algo.gspo_clip_low < 1 or algo.gspo_clip_high < 0:
        raise ConfigError("algo.gspo_clip_low must be in [0, 1) and algo.gspo_clip_high >= 0")
    if algo.cispo_clip_low < 0 or algo.cispo_clip_high < 0:
        raise ConfigError(
            "algo.cispo_clip_low and algo.cispo_clip_high must be >= 0 (the weight is clipped "
            "to [1 - low, 1 + high]; low >= 1 leaves it unbounded below)"
        )
    for key in ("clip_cov_ratio", "kl_cov_ratio"):
        if not 0 < getattr(algo, key) <= 1:
            raise ConfigError(f"algo.{key} must be in (0, 1], got {getattr(algo, key)}")
    if algo.clip_cov_low >= algo.clip_cov_high:
        raise ConfigError(
            f"algo.clip_cov_low ({algo.clip_cov_low}) must be below algo.clip_cov_high "
            f"({algo.clip_cov_high}): no covariance would fall in the band"
        )
    if algo.kl_cov_coef <= 0:
        raise ConfigError(f"algo.kl_cov_coef must be > 0, got {algo.kl_cov_coef}")
    if algo.gmpo_clip_low <= 0 or algo.gmpo_clip_high <= 0:
        raise ConfigError("algo.gmpo_clip_low and algo.gmpo_clip_high must be > 0 (log space)")


def _validate_step_mode(cfg: Config) -> None:
    algo, rollout, gigpo = cfg.algo, cfg.rollout, cfg.gigpo
    if not 0 < gigpo.gamma <= 1:
        raise ConfigError(f"gigpo.gamma must be in (0, 1], got {gigpo.gamma}")
    if not 0 < gigpo.similarity_threshold <= 1:
        raise ConfigError(
            f"gigpo.similarity_threshold must be in (0, 1], got {gigpo.similarity_threshold}"
        )
    estimator = _estimator(cfg)
    if estimator.step_wise:
        if rollout.mode != "step":
            raise ConfigError(
                f"algo.name={algo.name} trains each env step as its own sample: set "
                "rollout.mode=step"
            )
        from agentic_rl.envs.registry import anchored_env_names, has_anchor_states

        if not has_anchor_states(cfg.env.name):  # the env class declares anchor_states = True
            raise ConfigError(
                f"algo.name={algo.name} groups steps by anchor state, which env.name={cfg.env.name} "
                f"does not expose (envs with anchors: {', '.join(anchored_env_names())})"
            )
    else:
        _unused(
            cfg,
            ["gigpo.omega", "gigpo.gamma", "gigpo.norm", "gigpo.similarity_threshold"],
            f"algo.name={algo.name} is not step-wise (gigpo is)",
        )
    validate_roles(cfg)
    if rollout.mode == "episode":
        _unused(cfg, ["rollout.history_window"], "rollout.mode=episode keeps the whole history")
        return
    if rollout.mode == "memory":
        validate_memory_mode(cfg)
    if not (estimator.per_episode or estimator.step_wise or estimator.turn_level):
        names = _names(lambda e: e.per_episode or e.step_wise or e.turn_level)
        raise ConfigError(
            f"rollout.mode={rollout.mode} needs an estimator that credits the samples of an "
            f"episode together; algo.name={algo.name} is not one of {names}"
        )


def _validate_filters(cfg: Config) -> None:
    f, rollout = cfg.filters, cfg.rollout
    _check_choice("filters.metric", f.metric, FILTER_METRICS)
    if not (f.dynamic_sampling or f.roc):
        _unused(cfg, ["filters.metric"], "filters.dynamic_sampling and filters.roc are off")
    if f.max_gen_batches < 1:
        raise ConfigError(
            f"filters.max_gen_batches must be >= 1, got {f.max_gen_batches}: "
            "dynamic sampling could never fill a batch"
        )
    if f.dynamic_sampling:
        if rollout.group_size < 2:
            raise ConfigError(
                "filters.dynamic_sampling keeps groups whose rewards differ, which a group of "
                "rollout.group_size=1 never does: the batch could never fill"
            )
        if cfg.env.num_train_tasks < rollout.tasks_per_step:
            raise ConfigError(
                f"filters.dynamic_sampling needs rollout.tasks_per_step={rollout.tasks_per_step} "
                f"distinct tasks per step but env.num_train_tasks={cfg.env.num_train_tasks}: "
                "the batch could never fill"
            )
    else:
        _unused(cfg, ["filters.max_gen_batches"], "filters.dynamic_sampling is false")
    _validate_overlong(cfg)
    if cfg.algo.loss_agg == "seq-mean-token-sum-norm" and rollout.mode == "memory":
        raise ConfigError(
            "algo.loss_agg=seq-mean-token-sum-norm divides by the most tokens a row can "
            "generate, which rollout.mode=memory does not bound (each memory conversation has "
            "the env's own budget): use token-mean or seq-mean-token-mean"
        )
    if not 0 < f.variance_filter_keep <= 1:
        raise ConfigError(
            f"filters.variance_filter_keep must be in (0, 1], got {f.variance_filter_keep}"
        )
    if f.variance_filter_keep < 1 and rollout.group_size < 2:
        raise ConfigError("filters.variance_filter_keep ranks groups: rollout.group_size >= 2")
    if f.roc:
        if f.roc_oversample < 1 or f.roc_min_per_class < 0:
            raise ConfigError("filters.roc_oversample must be >= 1, roc_min_per_class >= 0")
        if rollout.group_size < 2 * f.roc_min_per_class:
            raise ConfigError(
                f"filters.roc keeps >= {f.roc_min_per_class} positives and negatives per group: "
                f"rollout.group_size={rollout.group_size} must be >= 2 x roc_min_per_class"
            )
    else:
        _unused(cfg, ["filters.roc_oversample", "filters.roc_min_per_class"], "filters.roc=false")
    if f.ttrl_vote_samples:
        if f.ttrl_vote_samples < max(rollout.group_size, 2):
            raise ConfigError(
                f"filters.ttrl_vote_samples={f.ttrl_vote_samples} must be >= 2 and >= "
                f"rollout.group_size={rollout.group_size} (vote on N, train on M <= N)"
            )
        if f.roc:
            raise ConfigError("filters.ttrl_vote_samples and filters.roc both set the samples")
    if rollout.mode == "step":
        for key in ("filters.overlong_filter", "filters.overlong_buffer", "filters.roc"):
            if _get(cfg, key):
                raise ConfigError(
                    f"{key} judges a whole episode's tokens; it does not apply to rollout.mode=step"
                )
        if f.ttrl_vote_samples:
            raise ConfigError("filters.ttrl_vote_samples votes on final answers: rollout.mode=step")


def _validate_overlong(cfg: Config) -> None:
    """DAPO's soft overlong penalty counts an episode's generated tokens up to the most it can
    generate (`max_generated_tokens`): a buffer longer than that penalises tokens that cannot
    exist, and in memory mode the episode's memory conversations have the env's own budgets,
    so the rollout config does not bound the length the penalty counts."""
    f, rollout = cfg.filters, cfg.rollout
    if not f.overlong_buffer:
        return
    if rollout.mode == "memory":
        raise ConfigError(
            "filters.overlong_buffer counts an episode's generated tokens against the most the "
            "rollout can generate, which rollout.mode=memory does not bound (each memory "
            "conversation has the env's own budget): set filters.overlong_buffer=0"
        )
    most = max_generated_tokens(rollout)
    if f.overlong_buffer > most:
        raise ConfigError(
            f"filters.overlong_buffer={f.overlong_buffer} exceeds the {most} tokens an episode "
            f"can generate (the smaller of rollout.max_total_tokens={rollout.max_total_tokens} "
            f"and rollout.max_turns={rollout.max_turns} x rollout.max_tokens_per_turn="
            f"{rollout.max_tokens_per_turn}): the penalty would start before the first token; "
            f"use a buffer of at most {most}"
        )


def _validate_self_play(cfg: Config) -> None:
    """rollout.scheme=self_play runs its own propose/solve step instead of the batch filters;
    it needs the env that has the self-play protocol, and that env needs it."""
    _check_choice("rollout.scheme", cfg.rollout.scheme, ROLLOUT_SCHEMES)
    self_play_env = cfg.env.name == "code_self_play"
    if self_play_env != (cfg.rollout.scheme == "self_play"):
        raise ConfigError(
            f"rollout.scheme={cfg.rollout.scheme} with env.name={cfg.env.name}: the self-play "
            "scheme (propose, validate, solve) runs with env.name=code_self_play, and that env "
            "only under rollout.scheme=self_play"
        )
    if not self_play_env:
        return
    for key in ("filters.dynamic_sampling", "filters.roc", "filters.ttrl_vote_samples"):
        if _get(cfg, key):
            raise ConfigError(
                f"{key} does not apply to env.name=code_self_play: its self-play step picks the "
                "tasks and rewards of every step (propose, validate, solve)"
            )
    if cfg.rollout.mode != "episode" or cfg.rollout.max_turns != 1:
        raise ConfigError(
            "env.name=code_self_play plays one answer per episode: set rollout.mode=episode "
            f"and rollout.max_turns=1 (got {cfg.rollout.mode}, {cfg.rollout.max_turns})"
        )


def _validate_thinking(cfg: Config) -> None:
    from agentic_rl.rollout.think_budget import STOP_TEXTS, THINKING_MODES

    rollout = cfg.rollout
    _check_choice("rollout.thinking_mode", rollout.thinking_mode, THINKING_MODES)
    _check_choice("rollout.think_stop", rollout.think_stop, tuple(STOP_TEXTS))
    _check_positive(cfg, ["rollout.think_budget"], allow_zero=True)
    for key in ("rollout.thinking_mode", "rollout.think_budget"):
        if _get(cfg, key) != _default(cfg, key) and (
            rollout.mode != "episode" or rollout.context_budget
        ):
            raise ConfigError(
                f"{key} applies to episode rollouts without a context budget "
                "(rollout.mode=episode, rollout.context_budget=0)"
            )
    if not rollout.think_budget:
        _unused(cfg, ["rollout.think_stop"], "rollout.think_budget=0 (no thinking budget)")
        return
    if rollout.thinking_mode == "no_think":
        raise ConfigError("rollout.think_budget does nothing with rollout.thinking_mode=no_think")
    if rollout.think_budget >= rollout.max_tokens_per_turn:
        raise ConfigError(
            f"rollout.think_budget={rollout.think_budget} must be below "
            f"rollout.max_tokens_per_turn={rollout.max_tokens_per_turn}: the turn would end first"
        )
    if rollout.max_staleness:
        raise ConfigError("rollout.think_budget is not wired into asynchronous rollouts yet")


def _validate_context_budget(cfg: Config) -> None:
    rollout = cfg.rollout
    _check_positive(
        cfg,
        ["rollout.context_budget", "rollout.context_keep_turns", "rollout.context_target"],
        allow_zero=True,
    )
    if not rollout.context_budget:
        _unused(
            cfg,
            ["rollout.context_keep_turns", "rollout.context_target"],
            "rollout.context_budget=0 keeps the whole history",
        )
        return
    if rollout.mode != "episode":
        raise ConfigError(
            "rollout.context_budget applies to rollout.mode=episode; step mode bounds each "
            "step's context with rollout.history_window"
        )
    if rollout.context_target > rollout.context_budget:
        raise ConfigError(
            f"rollout.context_target={rollout.context_target} exceeds "
            f"rollout.context_budget={rollout.context_budget}"
        )
    if not (_estimator(cfg).per_episode or _estimator(cfg).turn_level):
        names = _names(lambda e: e.per_episode or e.turn_level)
        raise ConfigError(
            "rollout.context_budget trains a long episode as several segments that share the "
            f"episode's advantage or credit its turns: algo.name must be one of {names}, "
            f"not {cfg.algo.name}"
        )

"""`validate(cfg)`: every rule that makes a loaded config fail, with a message naming the keys.

Two kinds of rules: values out of range, and combinations that would be silently ignored or can
never work (GSPO with token-level aggregation, GiGPO without step-wise rollouts on an env with
anchor states, dynamic sampling that can never fill a batch...). Called by `load.py` for
every config it builds. The LoRA / generator-backend / learner rules are in validate_engines.py,
the async and Ray rules in validate_scale.py, the shared checks (`_check_choice`, `_unused`...)
in checks.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentic_rl.config.checks import _check_choice, _check_positive, _default, _get, _unused
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.validate_engines import validate_engines
from agentic_rl.config.validate_scale import validate_distributed
from agentic_rl.formats.registry import CHAT_FORMATS

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config

ADVANTAGE_ESTIMATORS = (
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "ppo",
    "gigpo",
    "trr_pp",
)
# Estimators that give one advantage per sequence (GSPO needs one) / per episode (step mode).
SEQUENCE_LEVEL = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "gigpo", "trr_pp")
STEP_MODE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "gigpo")
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "gigpo")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
POLICY_LOSSES = ("ppo", "gspo")
KL_ESTIMATORS = ("k1", "k2", "k3")
ENV_NAMES = (
    "search_qa",
    "multihop_qa",
    "zerosearch_qa",
    "web_qa",
    "calculator",
    "math_tool",
    "math_text",
    "math_multitool",
    "code_repair",
    "code_self_play",
    "gridworld",
)
# Envs whose observations carry an anchor state (Observation.anchor), which GiGPO groups on.
ANCHORED_ENVS = ("gridworld",)
ROLLOUT_MODES = ("episode", "step")
ROLLOUT_SCHEMES = ("sample", "self_play")
GIGPO_NORMS = ("mean_std_norm", "mean_norm")
DTYPES = ("float32", "bfloat16")


def validate(cfg: Config) -> None:
    """Reject values that are invalid or would silently do nothing."""
    _check_choice("algo.name", cfg.algo.name, ADVANTAGE_ESTIMATORS)
    _check_choice("algo.loss_agg", cfg.algo.loss_agg, LOSS_AGGREGATIONS)
    _check_choice("algo.policy_loss", cfg.algo.policy_loss, POLICY_LOSSES)
    _check_choice("algo.kl_estimator", cfg.algo.kl_estimator, KL_ESTIMATORS)
    _check_choice("env.name", cfg.env.name, ENV_NAMES)
    _check_choice("rollout.chat_format", cfg.rollout.chat_format, tuple(CHAT_FORMATS))
    _check_choice("rollout.mode", cfg.rollout.mode, ROLLOUT_MODES)
    _check_choice("gigpo.norm", cfg.gigpo.norm, GIGPO_NORMS)
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
            "rollout.history_window",
            "warm_start.num_tasks",
            "env.format_penalty",
            "gigpo.omega",
            "filters.overlong_buffer",
            "filters.ttrl_vote_samples",
            "dpo.lr",
        ],
        allow_zero=True,
    )
    _validate_env_options(cfg)
    if cfg.rollout.train_on_observations and (cfg.algo.epochs > 1 or cfg.algo.kl_in_reward):
        raise ConfigError(
            "rollout.train_on_observations needs algo.epochs=1 and algo.kl_in_reward=false: "
            "observation tokens have no behaviour logprobs to form a ratio or a KL reward with"
        )
    if not 0 < cfg.rollout.top_p <= 1:
        raise ConfigError(f"rollout.top_p must be in (0, 1], got {cfg.rollout.top_p}")
    _validate_ppo_terms(cfg)
    if cfg.warm_start.num_tasks == 0 and cfg.warm_start.epochs != 1:
        raise ConfigError("warm_start.epochs is set but warm_start.num_tasks=0 disables it")
    if cfg.rollout.max_tokens_per_turn > cfg.rollout.max_total_tokens:
        raise ConfigError("rollout.max_tokens_per_turn exceeds rollout.max_total_tokens")
    _validate_policy_loss(cfg)
    _validate_step_mode(cfg)
    _validate_context_budget(cfg)
    _validate_filters(cfg)
    _validate_thinking(cfg)
    _validate_self_play(cfg)
    validate_engines(cfg)
    validate_distributed(cfg)


def _validate_ppo_terms(cfg: Config) -> None:
    algo = cfg.algo
    if not 0 <= algo.clip_low < 1 or algo.clip_high < 0:
        raise ConfigError("algo.clip_low must be in [0, 1) and algo.clip_high >= 0")
    if 0 < algo.dual_clip <= 1:
        raise ConfigError(f"algo.dual_clip must be > 1 (typically 3.0) or 0, got {algo.dual_clip}")
    if not 0 < algo.gamma <= 1 or not 0 <= algo.lam <= 1:
        raise ConfigError("algo.gamma must be in (0, 1] and algo.lam in [0, 1]")
    if algo.kl_in_reward and algo.kl_coef == 0:
        raise ConfigError("algo.kl_in_reward=true does nothing with algo.kl_coef=0")
    if algo.kl_in_reward and algo.name not in ("reinforce_pp", "ppo"):
        raise ConfigError(
            f"algo.kl_in_reward needs a token-level estimator (reinforce_pp or ppo), "
            f"not algo.name={algo.name}; use the KL loss term instead"
        )
    if algo.name in GROUP_ESTIMATORS and cfg.rollout.group_size < 2:
        raise ConfigError(
            f"algo.name={algo.name} compares samples of a group: rollout.group_size must be >= 2"
        )
    if algo.name != "trr_pp":
        _unused(cfg, ["algo.trr_type_field", "algo.trr_role_field"], "algo.name is not trr_pp")
    elif not algo.trr_type_field:
        raise ConfigError("algo.trr_type_field must name a Task.fields key for algo.name=trr_pp")


def _validate_policy_loss(cfg: Config) -> None:
    algo = cfg.algo
    if algo.policy_loss == "ppo":
        _unused(cfg, ["algo.gspo_clip_low", "algo.gspo_clip_high"], "algo.policy_loss is ppo")
        return
    if algo.loss_agg != "seq-mean-token-mean":
        raise ConfigError(
            "algo.policy_loss=gspo has one ratio per sequence, so the loss is a mean over "
            f"sequences: algo.loss_agg must be seq-mean-token-mean, not {algo.loss_agg}"
        )
    if algo.name not in SEQUENCE_LEVEL:
        raise ConfigError(
            f"algo.policy_loss=gspo needs one advantage per sequence; algo.name={algo.name} "
            f"gives token-level advantages (use one of {', '.join(SEQUENCE_LEVEL)})"
        )
    if algo.dual_clip:
        raise ConfigError("algo.dual_clip applies to the token-level ppo loss, not gspo")
    _unused(
        cfg,
        ["algo.clip_low", "algo.clip_high"],
        "algo.policy_loss=gspo clips with algo.gspo_clip_low / algo.gspo_clip_high",
    )
    if not 0 <= algo.gspo_clip_low < 1 or algo.gspo_clip_high < 0:
        raise ConfigError("algo.gspo_clip_low must be in [0, 1) and algo.gspo_clip_high >= 0")


def _validate_step_mode(cfg: Config) -> None:
    algo, rollout, gigpo = cfg.algo, cfg.rollout, cfg.gigpo
    if not 0 < gigpo.gamma <= 1:
        raise ConfigError(f"gigpo.gamma must be in (0, 1], got {gigpo.gamma}")
    if not 0 < gigpo.similarity_threshold <= 1:
        raise ConfigError(
            f"gigpo.similarity_threshold must be in (0, 1], got {gigpo.similarity_threshold}"
        )
    if algo.name == "gigpo":
        if rollout.mode != "step":
            raise ConfigError(
                "algo.name=gigpo trains each env step as its own sample: set rollout.mode=step"
            )
        if cfg.env.name not in ANCHORED_ENVS:
            raise ConfigError(
                f"algo.name=gigpo groups steps by anchor state, which env.name={cfg.env.name} "
                f"does not expose (envs with anchors: {', '.join(ANCHORED_ENVS)})"
            )
    else:
        _unused(
            cfg,
            ["gigpo.omega", "gigpo.gamma", "gigpo.norm", "gigpo.similarity_threshold"],
            "algo.name is not gigpo",
        )
    if rollout.mode == "episode":
        _unused(cfg, ["rollout.history_window"], "rollout.mode=episode keeps the whole history")
        return
    if algo.name not in STEP_MODE_ESTIMATORS:
        raise ConfigError(
            f"rollout.mode=step needs an episode-level estimator to share across the steps of "
            f"an episode; algo.name={algo.name} is not one of {', '.join(STEP_MODE_ESTIMATORS)}"
        )


def _validate_filters(cfg: Config) -> None:
    f, rollout = cfg.filters, cfg.rollout
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
    if f.overlong_buffer > rollout.max_total_tokens:
        raise ConfigError(
            f"filters.overlong_buffer={f.overlong_buffer} exceeds "
            f"rollout.max_total_tokens={rollout.max_total_tokens}"
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


def _validate_env_options(cfg: Config) -> None:
    from agentic_rl.envs import env_parameters, split_options  # heavy imports: only here

    if cfg.env.topk != _default(cfg, "env.topk") and "topk" not in env_parameters(cfg.env.name):
        raise ConfigError(f"env.topk does nothing: env.name={cfg.env.name} has no search tool")
    try:
        split_options(cfg.env.name, cfg.env.options)
    except ValueError as err:
        raise ConfigError(str(err)) from err
    from agentic_rl.envs.search_schemes import SCHEMES

    scheme = SCHEMES.get(str(cfg.env.options.get("reward")))
    if scheme is not None and scheme.score is not None and cfg.rollout.chat_format != "tags":
        raise ConfigError(
            f"env.options.reward={scheme.name} scores <think>/<search>/<answer> tags: it needs "
            f"rollout.chat_format=tags, got {cfg.rollout.chat_format}"
        )


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
    if cfg.algo.name not in ("grpo", "dr_grpo", "rloo"):
        raise ConfigError(
            "rollout.context_budget trains a long episode as several segments that share the "
            f"episode's advantage: algo.name must be grpo, dr_grpo or rloo, not {cfg.algo.name}"
        )

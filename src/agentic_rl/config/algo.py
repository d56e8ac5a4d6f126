"""Config sections of the algorithm: the advantage estimator and policy loss (`algo`), GiGPO's
step-level advantage (`gigpo`) and the batch filters between rollout and advantages
(`filters`). One dataclass per YAML section, a docstring per field;
`agentic_rl.config.schema` assembles them into `Config`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentic_rl.config.schema import Config


@dataclass
class AlgoConfig:
    name: str = "grpo"
    """Advantage estimator: a key of ADVANTAGE_ESTIMATORS in algos/estimators.py, whose entry
    says what it needs (groups, a value head, step-wise rollouts, task buckets). E.g. grpo,
    dr_grpo, rloo, ppo (GAE with a value head), gigpo (step-wise; see the `gigpo` section),
    trr_pp (Absolute Zero's REINFORCE++ with one baseline per task type x role), mt_grpo
    (MT-GRPO: GRPO plus group-normalised turn rewards on the turns before the last),
    turn_ppo (a turn-level critic with GAE over turns) and, on tree rollouts (rollout.tree),
    Tree-GRPO's estimators, named after its reference code's: tree_grpo (A_inter + A_intra),
    tree_grpo_2norm (normalised over the task, then over the tree), tree_grpo_inner (over the
    tree only), tree_grpo_per_token (both terms normalised over the pooled response tokens)."""
    policy_loss: str = "ppo"
    """A key of POLICY_LOSSES in algos/losses.py. "ppo": token-level clipped ratio
    (clip_low/clip_high, dual_clip). "gspo": GSPO's sequence-level ratio exp(mean_t log
    pi/pi_old) with its own clip range (gspo_clip_*). "cispo": MiniMax-M1's clipped,
    stop-gradient IS weight times log pi, every token keeps a gradient (cispo_clip_*).
    "clip_cov" / "kl_cov": PPO with a few high logprob-advantage covariance tokens detached
    (clip_cov_*) / KL-penalised without any ratio clip (kl_cov_*), against entropy collapse.
    "gmpo": the geometric mean of the token ratios, clipped per token in log space
    (gmpo_clip_*), sequence-level. "turn": one ratio per turn, the geometric mean of its
    tokens' ratios, clipped as a whole with PPO's clip_low / clip_high (ST-PPO's turn-level
    importance sampling, Turn-PPO's turn-level clipping; per-token loss, any estimator). Each
    loss's knobs are refused with another loss."""
    loss_agg: str = ""
    """Loss aggregation (LOSS_AGGREGATIONS in algos/losses.py): token-mean (DAPO: every token of
    the batch weighs the same), seq-mean-token-mean (GRPO: mean over each sequence's tokens,
    then over sequences), seq-mean-token-sum-norm (Dr. GRPO: sum over tokens / (a constant,
    the most tokens a row can generate, config.rollout.max_sample_tokens, x sequences)).
    "" (the default) = the estimator's own, filled in at load: seq-mean-token-sum-norm for
    dr_grpo, seq-mean-token-mean for the others (Estimator.loss_agg in algos/estimators.py).
    An estimator with an aggregation of its own (dr_grpo) replaces one the config inherited
    from a place that chose another estimator (the recipe's, when the command line or a stage
    sets algo.name); a conflicting one set on the command line is a load-time error
    (config/load.py settle_loss_agg)."""
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
    """Apply the KL as a per-token reward penalty instead of a loss term. It is taken against
    the learner's pi_old, recomputed before the advantages (as veRL does); with
    algo.recompute_old_logprobs=false pi_old is the generator's logprobs, refused where they
    are of another distribution (`generator_differs`)."""
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
    critic: str = "shared"
    """The PPO critic (ppo only; model/critic.py). "shared": a value head on the policy's own
    last hidden states: no extra model, but the value loss also trains the policy's trunk.
    "separate": the critic's own copy of the backbone plus a value head, as Search-R1 and veRL
    run PPO: the value loss never reaches the policy, the critic has its own parameter group
    (algo.critic_lr) and its own gradient clipping (optim.max_grad_norm), and is checkpointed
    as `critic`; it costs a second copy of the weights and of the learner's passes. Either way
    the value of token t is read from the state that predicts t. Not with model.lora_rank > 0."""
    critic_lr: float = 0.0
    """Learning rate of the critic's parameter group (value head, and with critic=separate its
    backbone); 0 = optim.lr. Search-R1 uses 10x the actor's (1e-5 vs 1e-6)."""
    epochs: int = 1
    """Optimisation passes over each rollout batch (each pass: algo.ppo_mini_batches optimizer
    steps); >1 makes the later passes off-policy, so the clip acts."""
    ppo_mini_batches: int = 1
    """PPO mini-batches per rollout batch: the batch's rows are split, in order, into this many
    mini-batches, each one optimizer step (its loss normalised over its own rows), so every
    mini-batch after the first is off-policy and the clip acts (veRL's ppo_mini_batch_size,
    OpenRLHF's train_batch_size, as a ratio). A count, not a size: the number of rows varies
    from step to step (step mode, filters) and a recipe's ratio survives scaling the batch down
    to CPU size (DAPO: 512 prompts / 32 per mini-batch = 16). Capped by the number of rows.
    Distinct from optim.micro_batch_size, which only accumulates gradients within a step.
    1 mini-batch and 1 epoch: one on-policy step, ratio exactly 1, no clipping."""
    recompute_old_logprobs: bool = True
    """pi_old, the PPO ratio's denominator: true = the learner recomputes the logprobs of the
    whole batch once, before the first mini-batch (veRL and OpenRLHF do: the ratio then
    measures only this update's own movement, and the generator's behaviour logprobs enter
    through algo.rollout_correction); with one mini-batch and one epoch the first forward pass
    is that recomputation, at no cost. false = pi_old is the generator's behaviour logprobs
    (veRL's "bypass mode"): no extra forward, but the clip then also acts on the rollout/training
    mismatch and no rollout correction can be applied."""
    rollout_correction: str = "auto"
    """Correction of the rollout/training mismatch (behaviour logprobs from the generator vs
    pi_old from the learner), a weight on each token's policy-gradient loss:
    "tis": truncated IS, min(pi_old / pi_behav, C) (Yao et al. 2025);
    "mis_token": drop tokens whose ratio is outside [1/C, C] (veRL's rollout_rs=token);
    "mis_seq_geo": drop sequences whose geometric-mean ratio is outside [1/C, C];
    "icepop": weigh tokens by the ratio inside [algo.rollout_correction_low, C], drop the
    others (IcePop, Ring-1T 2025; band [0.5, 5]); "none". "auto": "tis" (policy_loss=gspo or
    gmpo: "mis_seq_geo") when the generator's distribution differs from the learner's:
    rollout.backend=vllm, rollout.mixed_precision != learner.mixed_precision, or
    rollout.top_p < 1 (behaviour logprobs are of the truncated distribution, see
    backends/hf.py); "none" otherwise. Asynchronous rollouts
    (rollout.max_staleness > 0) always use "tis" with C = algo.stale_is_cap (decoupled PPO)."""
    rollout_correction_cap: float = 0.0
    """C of algo.rollout_correction; 0 = the mode's default: 2.0 for tis (Yao et al.'s C, veRL's
    rollout_is_threshold) and mis_token (veRL's token band [0.5, 2]); 1.01 for mis_seq_geo
    (geometric means stay close to 1: runs use bands like [0.99, 1.01]); 5.0 for icepop."""
    rollout_correction_low: float = 0.0
    """algo.rollout_correction=icepop: the band's lower bound alpha, in (0, 1]; 0 = 0.5 (veRL's
    IcePop preset). The other modes have no separate lower bound."""
    gspo_clip_low: float = 3e-4
    """GSPO: sequence-ratio clip below 1 (Zheng et al. 2025 use 3e-4)."""
    gspo_clip_high: float = 4e-4
    """GSPO: sequence-ratio clip above 1 (Zheng et al. 2025 use 4e-4)."""
    cispo_clip_low: float = 1.0
    """CISPO: the IS weight's lower bound is 1 - cispo_clip_low; >= 1 = no lower bound, as the
    paper leaves it (veRL's example: 10)."""
    cispo_clip_high: float = 0.2
    """CISPO: the IS weight is capped at 1 + cispo_clip_high (veRL's example: 0.2, a cap of 1.2;
    TRL's epsilon_high is the cap itself, not comparable)."""
    clip_cov_ratio: float = 2e-4
    """Clip-Cov: the fraction of a micro-batch's tokens detached (at least one), picked at
    random among those with clip_cov_low < Cov < clip_cov_high (veRL and the paper: 2e-4)."""
    clip_cov_low: float = 1.0
    """Clip-Cov: lower bound of the covariance band (veRL and the paper: 1)."""
    clip_cov_high: float = 5.0
    """Clip-Cov: upper bound of the covariance band (veRL and the paper: 5)."""
    kl_cov_ratio: float = 2e-4
    """KL-Cov: the fraction of a micro-batch's tokens (top covariance, at least one) that get
    the |log r| penalty (veRL: 2e-4; the paper's k is a percent, 0.2 = 2e-3 for 7B)."""
    kl_cov_coef: float = 1.0
    """KL-Cov: the penalty's coefficient (veRL's ppo_kl_coef falls back to 1, the paper's 1)."""
    gmpo_clip_low: float = 0.4
    """GMPO: each token's log-ratio is clipped below at -gmpo_clip_low (log space; the paper's
    range is (e^-0.4, e^0.4))."""
    gmpo_clip_high: float = 0.4
    """GMPO: each token's log-ratio is clipped above at gmpo_clip_high (log space)."""
    trr_type_field: str = "task_type"
    """TRR++: the Task.fields key holding the task type (e.g. "template" for calculator)."""
    trr_role_field: str = "role"
    """TRR++: the Task.fields key holding the role (propose / solve); "" = a single role."""
    role_groups: bool = False
    """Multi-agent envs (an env with `roles`, rollout.mode=memory), group estimators (grpo,
    dr_grpo, rloo): each role's samples are compared within (task group x role): an episode's
    reward for role k is the team's outcome plus k's own reward terms, normalised over the
    group's episodes in which k acted (algos/roles.py). false = MATPO's rule: every sample
    takes its episode's advantage, computed from the first acting role's reward."""
    turn_advantage_coef: float = 1.0
    """MT-GRPO (algo.name=mt_grpo): the weight lambda of the turn advantage added to the
    outcome advantage on the tokens of every turn before the last (Zeng et al. 2025's
    turn_advantage_coef, default 1.0); >= 0, 0 = GRPO's outcome advantage alone."""
    mt_grpo_outcome: str = "episode"
    """MT-GRPO: the reward its outcome advantage A^O normalises. "episode": the episode reward,
    which is the sum of every turn's step reward (plus what reward functions add), so A^O also
    carries the turn rewards that A^T credits; "last_turn": the last turn's reward alone (its
    step reward plus the reward functions'), the outcome apart from the intermediate turns, as
    the paper's outcome-only reward (Zeng et al. 2025) where the env pays the outcome on the
    last turn. "episode" stays the default: the recipes' measured runs used it."""
    stale_is_cap: float = 5.0
    """rollout.max_staleness > 0: each token's behaviour importance weight pi_prox / pi_behav
    (decoupled PPO) is truncated at this value, so very stale tokens cannot dominate."""


ROLLOUT_CORRECTIONS = ("auto", "none", "tis", "mis_token", "mis_seq_geo", "icepop")
CORRECTION_CAPS = {"tis": 2.0, "mis_token": 2.0, "mis_seq_geo": 1.01, "icepop": 5.0}
CORRECTION_LOWS = {"icepop": 0.5}
SEQUENCE_LOSSES = ("gspo", "gmpo")
"""The policy losses with one ratio per sequence (algos/losses.py POLICY_LOSSES sequence_level;
a test keeps the two equal): "auto" corrects them per sequence."""
"""The default lower bound of the corrections with a band of their own (algos/offpolicy.py
BANDED_CORRECTIONS)."""


def generator_differs(cfg: Config) -> list[str]:
    """The settings that make the generator's behaviour logprobs those of another distribution
    than the learner's (empty: the same one, up to float rounding): another engine
    (rollout.backend=vllm), another precision, or top-p sampling, whose logprobs are of the
    renormalised nucleus (backends/hf.py), each named as `key=value` for messages."""
    rollout, learner = cfg.rollout, cfg.learner
    out = []
    if rollout.backend == "vllm":
        out.append("rollout.backend=vllm")
    if rollout.mixed_precision != learner.mixed_precision:
        out.append(
            f"rollout.mixed_precision={rollout.mixed_precision} vs "
            f"learner.mixed_precision={learner.mixed_precision}"
        )
    if rollout.top_p < 1:
        out.append(f"rollout.top_p={rollout.top_p:g}")
    return out


def rollout_correction(cfg: Config) -> tuple[str, float]:
    """The rollout correction a run applies and its cap C: `algo.rollout_correction` with
    "auto" resolved (see its docstring) and `algo.rollout_correction_cap` 0 made the mode's
    default. ("none", 0.0) when nothing corrects."""
    algo, rollout = cfg.algo, cfg.rollout
    if rollout.max_staleness > 0:  # decoupled PPO: the truncated weight of the stale tokens
        return "tis", algo.stale_is_cap
    mode = algo.rollout_correction
    if mode == "auto":
        differs = bool(generator_differs(cfg))
        if not differs or not algo.recompute_old_logprobs or rollout.train_on_observations:
            return "none", 0.0
        mode = "mis_seq_geo" if algo.policy_loss in SEQUENCE_LOSSES else "tis"
    if mode == "none":
        return "none", 0.0
    return mode, algo.rollout_correction_cap or CORRECTION_CAPS[mode]


def rollout_correction_low(cfg: Config) -> float | None:
    """The lower bound of the run's rollout-correction band when its mode has one of its own
    (icepop): `algo.rollout_correction_low`, 0 made the mode's default; None otherwise."""
    mode = rollout_correction(cfg)[0]
    if mode not in CORRECTION_LOWS:
        return None
    return cfg.algo.rollout_correction_low or CORRECTION_LOWS[mode]


@dataclass
class DistillConfig:
    """On-policy distillation (GKD, Agarwal et al. 2024; Thinking Machines 2025): the student
    samples, a frozen teacher scores the student's tokens, and each token's advantage gets
    -coef * (log pi_student - log pi_teacher), the per-token reverse KL (algos/distill.py)."""

    teacher: str = ""
    """The teacher: a Hugging Face model directory (config.json), a checkpoint, or a run
    directory (its latest checkpoint). It must share the student's tokenizer. "" = off."""
    coef: float = 1.0
    """The reverse-KL weight (slime's --opd-kl-coef, default 1)."""
    task_reward: bool = True
    """true: the distillation term is added to the estimator's task advantages (distillation +
    RL); false: the task reward is ignored and the advantage is the distillation term alone."""


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


FILTER_METRICS = ("outcome", "reward")
"""The values filters.metric may name (train/shaping.py filter_values)."""


@dataclass
class FilterConfig:
    """Batch filters between rollout and advantages (DAPO, RoC, StarPO-S, TTRL)."""

    dynamic_sampling: bool = False
    """DAPO: drop groups whose filters.metric values are all equal and generate more until the
    batch holds rollout.tasks_per_step groups."""
    metric: str = "outcome"
    """What dynamic sampling (and RoC's equal-reward drop and class split) compares within a
    group. "outcome": each episode's reward before reward shaping (the env's, or TTRL's vote
    reward; without the DAPO overlong penalty), as DAPO filters on accuracy: an all-correct
    group whose answers differ only in length penalty is dropped, since GRPO's std division
    would turn those small length differences into +-1 advantages. "reward": the shaped reward
    the advantages are computed from."""
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

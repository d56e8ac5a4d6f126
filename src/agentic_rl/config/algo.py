"""Config sections of the algorithm: the advantage estimator and policy loss (`algo`), GiGPO's
step-level advantage (`gigpo`) and the batch filters between rollout and advantages
(`filters`). One dataclass per YAML section, a docstring per field; re-exported by
`agentic_rl.config.load`, which assembles them into `Config`."""

from __future__ import annotations

from dataclasses import dataclass


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

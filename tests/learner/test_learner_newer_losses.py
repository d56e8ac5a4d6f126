"""CISPO, Clip-Cov, KL-Cov, GMPO, the turn-level ratio and IcePop through `update` on the tiny
model: where the ratio is 1 the new losses give the plain policy gradient they reduce to, the
restraint they add shows in the gradient and in `clip_frac`, and IcePop weighs or drops tokens
(`rollout_correction_*`)."""

import copy
import math

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import forward_no_grad, update
from agentic_rl.types import Trajectory

BASE = ["model.name=tiny", "algo.clip_high=0.2", "optim.max_grad_norm=0"]
ONE_STEP = [*BASE, "algo.ppo_mini_batches=1"]


def trajectories(n=4, seed=0):
    """n rows (prompt 4 tokens, 6 policy tokens in two turns of 3), rewards 0/1 alternating,
    one group."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(5, 1000, (10,), generator=g).tolist()
        mask = [0] * 4 + [1] * 6
        turns = [(4, 7), (7, 10)]
        out.append(Trajectory(ids, mask, [0.0] * 10, 4, turns, reward=float(i % 2), group_id="g"))
    return out


def batch_of(model, cfg, behav_shift=0.0):
    batch = collate(trajectories(), 0)
    current, _ = forward_no_grad(model, batch, 64, 8)
    batch.old_logprobs = current.clone()
    batch.behav_logprobs = (current - behav_shift) * batch.loss_mask
    compute_advantages(batch, cfg.algo)
    return batch


def grads(model, overrides, behav_shift=0.0):
    cfg = load_config(None, overrides)
    model = copy.deepcopy(model)
    batch = batch_of(model, cfg, behav_shift)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return grad, metrics


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


@pytest.mark.parametrize(
    ("loss", "agg"),
    [("cispo", "token-mean"), ("gmpo", "seq-mean-token-mean"), ("turn", "token-mean")],
)
def test_at_ratio_one_cispo_gmpo_and_turn_are_the_plain_policy_gradient(tiny, loss, agg):
    # CISPO: -sg(1) A grad log pi; GMPO: -A grad exp(mean_t log r) = -A mean_t grad log pi;
    # turn (A constant along a turn, as episode-level GRPO gives): each of the |k| tokens'
    # -A grad s_k = -A / |k| sum_{t in k} grad log pi_t, summed over the turn's tokens
    plain, _ = grads(tiny, [*ONE_STEP, f"algo.loss_agg={agg}"])
    new, metrics = grads(tiny, [*ONE_STEP, f"algo.policy_loss={loss}", f"algo.loss_agg={agg}"])
    assert plain.abs().sum() > 0
    close(new, plain)
    assert metrics["clip_frac"] == 0.0


def test_clip_cov_detaching_every_token_leaves_no_gradient(tiny):
    wide = ["algo.clip_cov_ratio=1", "algo.clip_cov_low=-100", "algo.clip_cov_high=100"]
    grad, metrics = grads(tiny, [*ONE_STEP, "algo.policy_loss=clip_cov", *wide])
    assert grad.abs().sum() == 0 and metrics["clip_frac"] == 1.0
    # the paper's setting detaches max(1, floor(2e-4 * 24)) = 1 token of a micro-batch, if any
    # falls in the band (1, 5); this batch's covariances: one micro-batch of 24 tokens
    _, metrics = grads(tiny, [*ONE_STEP, "algo.policy_loss=clip_cov", "algo.clip_cov_low=0"])
    assert metrics["clip_frac"] == pytest.approx(1 / 24)


def test_kl_cov_penalises_top_covariance_tokens_after_the_first_mini_batch(tiny):
    overrides = [*BASE, "algo.policy_loss=kl_cov", "algo.ppo_mini_batches=2", "optim.lr=1e-2"]
    cfg = load_config(None, overrides)
    model = copy.deepcopy(tiny)
    batch = batch_of(model, cfg)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.5), batch, cfg)
    # k = max(1, floor(2e-4 * 12)) = 1 token in each of the 2 mini-batches (12 tokens each)
    assert metrics["clip_frac"] == pytest.approx(2 / 24)
    assert metrics["optimizer_steps"] == 2.0 and math.isfinite(metrics["loss"])


@pytest.mark.parametrize(
    ("shift", "scale", "zeroed"),
    [
        (math.log(3.0), 3.0, 0.0),  # k = 3 inside [0.5, 5]: weight 3 (masked IS would give 1)
        (math.log(0.7), 0.7, 0.0),  # k = 0.7 inside the band
        (math.log(6.0), 0.0, 1.0),  # outside: every token dropped
        (math.log(0.4), 0.0, 1.0),  # below 0.5: dropped
    ],
)
def test_icepop_weighs_in_band_tokens_by_their_ratio_and_drops_the_rest(tiny, shift, scale, zeroed):
    plain, _ = grads(tiny, [*ONE_STEP, "algo.rollout_correction=none"], shift)
    corrected, metrics = grads(tiny, [*ONE_STEP, "algo.rollout_correction=icepop"], shift)
    if scale:  # the gradient is linear in the token weights: scaled by exactly k
        close(corrected, scale * plain)
    else:
        assert corrected.abs().sum() == 0 and plain.abs().sum() > 0
    assert metrics["rollout_correction_zeroed"] == zeroed
    assert metrics["rollout_correction_weight"] == pytest.approx(scale, rel=1e-4)


def test_icepop_lower_bound_is_configurable(tiny):
    band = ["algo.rollout_correction=icepop", "algo.rollout_correction_low=0.8"]
    _, metrics = grads(tiny, [*ONE_STEP, *band], math.log(0.7))  # 0.7 < 0.8: dropped
    assert metrics["rollout_correction_zeroed"] == 1.0


def test_turn_ratio_clips_whole_turns_after_the_first_mini_batch(tiny):
    # two mini-batches at a large step: the second's ratios move; every clipped token belongs to
    # a clipped turn, so clip_frac is a multiple of a turn's share (3 of 24 tokens)
    overrides = [*BASE, "algo.policy_loss=turn", "algo.ppo_mini_batches=2", "algo.clip_high=0.01"]
    cfg = load_config(None, [*overrides, "algo.clip_low=0.01", "optim.lr=1e-2"])
    model = copy.deepcopy(tiny)
    batch = batch_of(model, cfg)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=5.0), batch, cfg)
    clipped_tokens = metrics["clip_frac"] * 24
    assert clipped_tokens > 0 and clipped_tokens == pytest.approx(3 * round(clipped_tokens / 3))


@pytest.mark.parametrize("loss", ["cispo", "gmpo", "kl_cov", "turn"])
def test_micro_batches_add_up_to_the_mini_batch_gradient(tiny, loss):
    agg = "seq-mean-token-mean" if loss == "gmpo" else "token-mean"
    common = [*BASE, f"algo.policy_loss={loss}", f"algo.loss_agg={agg}"]
    whole, _ = grads(tiny, [*common, "optim.micro_batch_size=8"])
    split, _ = grads(tiny, [*common, "optim.micro_batch_size=1"])
    if loss != "kl_cov":  # KL-Cov picks its tokens per micro-batch (as veRL does)
        close(split, whole)
    assert whole.abs().sum() > 0

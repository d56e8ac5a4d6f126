"""PPO mini-batches (algo.ppo_mini_batches), pi_old (algo.recompute_old_logprobs), the
rollout/training mismatch metrics and the rollout corrections, through `update`."""

import copy
import math

import pytest
import torch

from agentic_rl.algos.losses import aggregate_loss, ppo_clip_loss
from agentic_rl.config.load import load_config
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import forward_no_grad, mini_batch_rows, update
from agentic_rl.model.load import token_logprobs
from agentic_rl.types import Trajectory

ONE_STEP = ["model.name=tiny", "algo.ppo_mini_batches=1", "algo.clip_high=0.2"]


def trajectories(n=4, seed=0, same=False):
    """n rows (prompt 4 tokens, 6 policy tokens), rewards 0/1 alternating, one group; with
    `same`, every row has the same tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = torch.randint(5, 1000, (10,), generator=torch.Generator().manual_seed(seed))
        if not same:
            ids = torch.randint(5, 1000, (10,), generator=g)
        mask = [0] * 4 + [1] * 6
        out.append(Trajectory(ids.tolist(), mask, [0.0] * 10, 4, reward=float(i % 2), group_id="g"))
    return out


def batch_of(model, trajs, cfg, behav_shift=0.0):
    """A collated batch whose behaviour logprobs are the model's own minus `behav_shift` (a
    generator that found every sampled token e^shift times less likely)."""
    batch = collate(trajs, 0)
    current, _ = forward_no_grad(model, batch, 64, 8)
    batch.old_logprobs = current.clone()
    batch.behav_logprobs = (current - behav_shift) * batch.loss_mask
    compute_advantages(batch, cfg.algo)
    return batch


def test_mini_batch_rows_split_in_order():
    assert [r.tolist() for r in mini_batch_rows(5, 2)] == [[0, 1, 2], [3, 4]]
    assert [r.tolist() for r in mini_batch_rows(3, 16)] == [[0], [1], [2]]  # capped by rows
    assert [r.tolist() for r in mini_batch_rows(4, 1)] == [[0, 1, 2, 3]]


def test_one_mini_batch_is_the_plain_on_policy_gradient(tiny):
    """One mini-batch, one epoch: the same step as a hand-written full-batch policy gradient
    (ratio 1, no clip), in any micro-batch size."""
    cfg = load_config(None, [*ONE_STEP, "algo.loss_agg=token-mean", "optim.max_grad_norm=0"])
    trajs = trajectories()
    ref = copy.deepcopy(tiny)
    batch = batch_of(ref, trajs, cfg)
    lp, _, _ = token_logprobs(ref, batch.input_ids, batch.attention_mask, 64)
    pg, _ = ppo_clip_loss(lp, lp.detach(), batch.advantages, batch.loss_mask, 0.2, 0.2)
    aggregate_loss(pg, batch.loss_mask, "token-mean").backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= 0.5 * p.grad
    for micro in (8, 1):
        model = copy.deepcopy(tiny)
        cfg.optim.micro_batch_size = micro
        metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.5), batch, cfg)
        assert metrics["optimizer_steps"] == 1 and metrics["clip_frac"] == 0
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # float rounding


def test_later_mini_batch_is_off_policy_and_clips(tiny):
    """Two identical rows, two mini-batches: the first step (ratio exactly 1) raises the
    tokens' probability far beyond 1 + clip_high, so the second mini-batch, whose pi_old is
    the weights before the first step, is clipped on every token: clip_frac = (0 + 6) / 12."""
    cfg = load_config(None, ["model.name=tiny", "algo.ppo_mini_batches=2", "optim.max_grad_norm=0"])
    trajs = trajectories(n=2, same=True)
    for t in trajs:
        t.reward = 1.0
    trajs[0].group_id, trajs[1].group_id = "a", "b"
    batch = collate(trajs, 0)
    batch.advantages = batch.loss_mask.clone()  # A = +1 on every policy token
    model = copy.deepcopy(tiny)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, cfg)
    assert metrics["optimizer_steps"] == 2
    assert metrics["clip_frac"] == pytest.approx(0.5)
    # pi_old was recomputed once, before the first step: the initial weights' logprobs
    initial, _ = forward_no_grad(tiny, batch, 64, 8)
    torch.testing.assert_close(batch.old_logprobs, initial)
    # one mini-batch of the same rows: ratio 1, nothing clipped
    cfg1 = load_config(None, ONE_STEP)
    single = update(copy.deepcopy(tiny), torch.optim.SGD(tiny.parameters(), lr=0.0), batch, cfg1)
    assert single["clip_frac"] == 0.0


def test_optimizer_steps_are_mini_batches_times_epochs(tiny):
    cfg = load_config(None, ["model.name=tiny", "algo.ppo_mini_batches=3", "algo.epochs=2"])
    model = copy.deepcopy(tiny)
    batch = batch_of(model, trajectories(n=6), cfg)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(1))
    metrics = update(model, optimizer, batch, cfg)
    assert len(steps) == 6 and metrics["optimizer_steps"] == 6.0
    # a mini-batch none of whose rows has an advantage takes no step
    batch = batch_of(model, trajectories(n=6), cfg)
    batch.advantages[:2] = 0  # rows 0-1: the first of the 3 mini-batches
    steps.clear()
    metrics = update(model, optimizer, batch, cfg)
    assert len(steps) == 4 and metrics["trained_sequences"] == 4


def test_pi_old_is_the_behaviour_logprobs_without_recomputation(tiny):
    """recompute_old_logprobs=false: pi_old = the generator's logprobs, so with one mini-batch
    the ratio is pi / pi_behav and the clip acts on the mismatch (veRL's bypass mode)."""
    cfg = load_config(None, [*ONE_STEP, "algo.recompute_old_logprobs=false", "algo.clip_low=0.001"])
    model = copy.deepcopy(tiny)
    batch = batch_of(model, trajectories(), cfg, behav_shift=math.log(2))
    batch.old_logprobs = batch.behav_logprobs.clone()
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    # ratio 2 on every token: clipped where A > 0 (2 > 1 + 0.2), not where A < 0
    positive = float(((batch.advantages > 0) & (batch.loss_mask > 0)).sum())
    assert metrics["clip_frac"] == pytest.approx(positive / float(batch.loss_mask.sum()))


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_mismatch_metrics_by_hand(tiny, mini_batches):
    """Behaviour logprobs 0.1 nats below the learner's on every sampled token: mean k3 =
    e^0.1 - 1 - 0.1 = 0.0051709 and max |delta| = 0.1, from the learner's first forward (one
    mini-batch) or from the recomputed pi_old (two)."""
    cfg = load_config(None, ONE_STEP if mini_batches == 1 else ["model.name=tiny"])
    model = copy.deepcopy(tiny)
    batch = batch_of(model, trajectories(), cfg, behav_shift=0.1)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    assert metrics["mismatch_k3"] == pytest.approx(math.exp(0.1) - 1.1, rel=1e-3)
    assert metrics["mismatch_max_abs"] == pytest.approx(0.1, abs=1e-4)
    assert "rollout_correction_weight" not in metrics  # fp32 HF rollouts: auto = none


def _grads(model, batch, cfg):
    model = copy.deepcopy(model)
    update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    return torch.cat([p.grad.flatten() for p in model.parameters()]), model


@pytest.mark.parametrize(
    ("mode", "shift", "scale"),
    [
        ("tis", math.log(1.5), 1.5),  # weight min(1.5, 2)
        ("tis", math.log(3.0), 2.0),  # truncated at C = 2
        ("mis_token", math.log(1.5), 1.0),  # inside [1/2, 2]: kept
        ("mis_token", math.log(3.0), 0.0),  # outside: dropped
        ("mis_seq_geo", 0.005, 1.0),  # geometric mean 1.005 inside [1/1.01, 1.01]
        ("mis_seq_geo", 0.02, 0.0),  # 1.0202: the whole sequence dropped
    ],
)
def test_rollout_corrections_weigh_the_policy_gradient(tiny, mode, shift, scale):
    """One on-policy step, no clip: the gradient is linear in the token weights, so a weight
    w = pi_old / pi_behav (truncated, or masked to 0/1) scales it by exactly w."""
    base = [*ONE_STEP, "optim.max_grad_norm=0"]
    cfg = load_config(None, [*base, f"algo.rollout_correction={mode}"])
    plain_cfg = load_config(None, [*base, "algo.rollout_correction=none"])
    batch = batch_of(tiny, trajectories(), cfg, behav_shift=shift)
    plain, _ = _grads(tiny, batch, plain_cfg)
    corrected, _ = _grads(tiny, batch, cfg)
    assert plain.abs().sum() > 0
    tol = {"rtol": 1e-4, "atol": 1e-4 * float(plain.abs().max())}
    torch.testing.assert_close(corrected, scale * plain, **tol)


def test_bf16_rollouts_turn_tis_on_and_report_its_weight(tiny):
    cfg = load_config(None, [*ONE_STEP, "rollout.mixed_precision=bf16"])
    model = copy.deepcopy(tiny)
    batch = batch_of(model, trajectories(), cfg, behav_shift=math.log(3.0))
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    assert metrics["rollout_correction_weight"] == pytest.approx(2.0, rel=1e-4)  # min(3, C=2)


def test_learner_logprobs_at_the_sampling_temperature(tiny):
    """rollout.temperature = 0.5: the loss's logprobs are log softmax(logits / 0.5), so
    behaviour logprobs taken at that temperature show no mismatch."""
    cfg = load_config(None, [*ONE_STEP, "rollout.temperature=0.5"])
    batch = collate(trajectories(), 0)
    logits = tiny(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    at_t = torch.log_softmax(logits[:, :-1].float() / 0.5, -1)
    picked = at_t.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    behav = torch.zeros_like(batch.loss_mask)
    behav[:, 1:] = picked.detach()
    batch.behav_logprobs = behav * batch.loss_mask
    compute_advantages(batch, cfg.algo)
    metrics = update(copy.deepcopy(tiny), torch.optim.SGD(tiny.parameters(), lr=0.0), batch, cfg)
    assert metrics["mismatch_max_abs"] < 1e-4
    cfg.rollout.temperature = 1.0  # the learner at temperature 1 is a different distribution
    metrics = update(copy.deepcopy(tiny), torch.optim.SGD(tiny.parameters(), lr=0.0), batch, cfg)
    assert metrics["mismatch_max_abs"] > 1e-2

"""The rollout/training mismatch metrics (issue 31, item 8): measured over every row on the
one-step path (zero-advantage rows included, which the update skips), and k3 in float64."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.offpolicy import rollout_mismatch
from agentic_rl.config.load import load_config
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import forward_no_grad, update
from agentic_rl.model.load import tiny_model
from agentic_rl.types import Trajectory


def test_k3_resolves_values_far_below_float32s_resolution():
    # d = old - behav = 1e-4: k3 = exp(d) - 1 - d = d^2/2 + d^3/6 + ... ~ 5.0002e-9; in
    # float32 exp(d) - 1 - d is rounding noise of ~1e-8
    old = torch.tensor([[-1.0, -2.0]])
    behav = old - 1e-4
    k3, delta = rollout_mismatch(old, behav, torch.ones_like(old))
    d = (old.double() - behav.double())[0, 0].item()  # the float32 inputs' exact difference
    assert k3.dtype == torch.float64
    assert float(k3[0, 0]) == pytest.approx(math.expm1(d) - d, rel=1e-6)
    assert float(delta[0, 0]) == pytest.approx(d, rel=1e-6)


def _row(ids, reward, group, lp=None):
    n = len(ids)
    return Trajectory(
        ids,
        [0, 0] + [1] * (n - 2),
        lp or [0.0] * n,
        prompt_length=2,
        turn_spans=[(2, n)],
        step_rewards=[reward],
        reward=reward,
        group_id=group,
    )


def test_the_one_step_path_measures_every_row():
    cfg = load_config(
        None,
        ["model.name=tiny", "algo.ppo_mini_batches=1", "algo.clip_high=0.2", "optim.lr=1e-6"],
    )
    model = tiny_model(128, seed=0)
    ids = [[1, 2, 11, 12, 13], [1, 2, 14, 15, 16], [1, 2, 17, 18, 19], [1, 2, 20, 21, 22]]
    rewards, groups = [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]  # group b: zero advantage
    plain = collate([_row(i, r, g) for i, r, g in zip(ids, rewards, groups, strict=True)], 0)
    learner, _ = forward_no_grad(model, plain, 64, 8)
    # the generator agrees on group a's rows and is 0.2 nats off on group b's
    shift = torch.tensor([0.0, 0.0, 0.2, 0.2])[:, None]
    behav = torch.where(plain.loss_mask > 0, learner + shift, 0)
    batch = collate(
        [_row(i, r, g, b) for i, r, g, b in zip(ids, rewards, groups, behav.tolist(), strict=True)],
        0,
    )
    compute_advantages(batch, cfg.algo)
    assert (batch.advantages[2:] == 0).all()  # the update skips group b's rows
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)
    metrics = update(model, optimizer, batch, cfg)
    assert metrics["trained_sequences"] == 2
    # d = -0.2 on half of the tokens, 0 on the other half: k3 = exp(d) - 1 - d
    want = (math.exp(-0.2) - 1 + 0.2) / 2
    assert metrics["mismatch_k3"] == pytest.approx(want, rel=1e-3)
    assert metrics["mismatch_max_abs"] == pytest.approx(0.2, abs=1e-4)

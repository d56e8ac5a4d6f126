import math

import pytest
import torch

from agentic_rl.algos.losses import ppo_clip_loss
from agentic_rl.algos.offpolicy import decoupled_ppo_loss, truncated_is_weights

LOG = math.log


def test_truncated_is_weights_by_hand():
    # pi_prox / pi_behav = 0.5/0.25 = 2, 0.2/0.4 = 0.5, 0.9/0.09 = 10 -> capped at 5; masked: 0
    prox = torch.tensor([[LOG(0.5), LOG(0.2), LOG(0.9), 0.0]])
    behav = torch.tensor([[LOG(0.25), LOG(0.4), LOG(0.09), float("-inf")]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = truncated_is_weights(prox, behav, mask, cap=5.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 5.0, 0.0]]))
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(prox, behav, mask, cap=0.5)


def test_decoupled_ppo_loss_by_hand():
    prox = torch.tensor([[LOG(0.5), LOG(0.2), LOG(0.9)]])
    behav = torch.tensor([[LOG(0.25), LOG(0.4), LOG(0.09)]])  # w = 2, 0.5, 5 (cap 5)
    u = torch.tensor([[1.2, 0.5, 1.0]])  # pi_theta / pi_prox
    theta = (prox + u.log()).clone().requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3)
    loss, clipped = decoupled_ppo_loss(theta, prox, behav, adv, mask, 0.2, 0.2, cap=5.0)
    # token 0: -w * min(1.2 * 1, clip(1.2) * 1) = -2 * 1.2 = -2.4
    # token 1: A < 0, u = 0.5 clipped to 0.8: -0.5 * min(-0.5, -0.8) = 0.5 * 0.8 = 0.4
    # token 2: -5 * 1.0 * 2 = -10
    assert torch.allclose(loss, torch.tensor([[-2.4, 0.4, -10.0]]))
    assert clipped.tolist() == [[False, True, False]]
    loss.sum().backward()
    # d/d log pi_theta: -w * u * A where unclipped, 0 where clipped
    assert torch.allclose(theta.grad, torch.tensor([[-2.4, 0.0, -10.0]]))


def test_fresh_samples_reduce_to_the_ppo_clip_loss():
    g = torch.Generator().manual_seed(0)
    lp, old = -torch.rand(2, 5, generator=g), -torch.rand(2, 5, generator=g)
    adv, mask = torch.randn(2, 5, generator=g), torch.tensor([[1.0] * 5, [1, 1, 0, 0, 0]])
    ours, c1 = decoupled_ppo_loss(lp, old, old, adv, mask, 0.2, 0.28)
    ppo, c2 = ppo_clip_loss(lp, old, adv, mask, 0.2, 0.28)
    assert torch.equal(ours, ppo) and torch.equal(c1, c2)


def test_weights_carry_no_gradient():
    prox = torch.tensor([[LOG(0.5)]], requires_grad=True)
    behav = torch.tensor([[LOG(0.25)]], requires_grad=True)
    w = truncated_is_weights(prox, behav, torch.ones(1, 1), cap=5.0)
    assert float(w) == pytest.approx(2.0) and not w.requires_grad

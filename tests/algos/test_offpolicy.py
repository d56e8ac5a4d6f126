import math

import pytest
import torch

from agentic_rl.algos.losses import ppo_clip_loss
from agentic_rl.algos.offpolicy import (
    ROLLOUT_CORRECTIONS,
    decoupled_ppo_loss,
    geometric_sequence_mask_weights,
    icepop_weights,
    masked_is_token_weights,
    rollout_mismatch,
    truncated_is_weights,
)

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


def test_masked_is_token_weights_by_hand():
    # pi_old / pi_behav = 2 (edge: kept), 0.5 (edge: kept), 2.5 (dropped), 0.3 (dropped), 1.2
    old = torch.tensor([[LOG(0.5), LOG(0.2), LOG(0.5), LOG(0.03), LOG(0.6), 0.0]])
    behav = torch.tensor([[LOG(0.25), LOG(0.4), LOG(0.2), LOG(0.1), LOG(0.5), float("nan")]])
    mask = torch.tensor([[1.0, 1, 1, 1, 1, 0]])
    w = masked_is_token_weights(old, behav, mask, cap=2.0)
    assert w.tolist() == [[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]]
    # the wider band [1/5, 5] keeps all five
    assert masked_is_token_weights(old, behav, mask, cap=5.0).tolist() == [[1, 1, 1, 1, 1, 0]]
    with pytest.raises(ValueError, match="cap"):
        masked_is_token_weights(old, behav, mask, cap=0.9)


def test_icepop_weights_by_hand():
    # k = pi_old / pi_behav = 2, 0.5 (lower edge: kept), 5 (upper edge: kept), 0.3, 6, 1.2
    old = torch.tensor([[LOG(0.5), LOG(0.2), LOG(0.5), LOG(0.03), LOG(0.6), LOG(0.6), 0.0]])
    behav = torch.tensor(
        [[LOG(0.25), LOG(0.4), LOG(0.1), LOG(0.1), LOG(0.1), LOG(0.5), float("nan")]]
    )
    mask = torch.tensor([[1.0, 1, 1, 1, 1, 1, 0]])
    w = icepop_weights(old, behav, mask, cap=5.0, low=0.5)
    # in band: the weight is k itself (not 1 as masked IS gives); out of band: 0
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 5.0, 0.0, 0.0, 1.2, 0.0]]))
    assert not w.requires_grad
    # the default band is [0.5, 5]; the table passes the cap (and low) positionally
    torch.testing.assert_close(ROLLOUT_CORRECTIONS["icepop"](old, behav, mask, 5.0), w)
    narrow = icepop_weights(old, behav, mask, cap=1.5, low=0.9)
    torch.testing.assert_close(narrow, torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 1.2, 0.0]]))
    for low, cap in [(0.0, 5.0), (1.5, 5.0), (0.5, 0.9)]:
        with pytest.raises(ValueError, match="low"):
            icepop_weights(old, behav, mask, cap=cap, low=low)


def test_geometric_sequence_mask_by_hand():
    # row 0: log-ratios +0.02, -0.01 -> mean 0.005 -> g = e^0.005 = 1.005 <= 1.01: kept
    # row 1: log-ratios +0.03, +0.01 (third token masked out) -> mean 0.02 -> g = 1.0202: dropped
    # row 2: log-ratios -0.015 -> g = 0.9851 < 1/1.01 = 0.9901: dropped; row 3: no tokens
    old = torch.tensor([[0.02, -0.01, 0.0], [0.03, 0.01, 5.0], [-0.015, 0.0, 0.0], [0.0] * 3])
    behav = torch.zeros(4, 3)
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]])
    w = geometric_sequence_mask_weights(old, behav, mask, cap=1.01)
    assert w.tolist() == [[1, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    # a band of [1/1.05, 1.05] keeps rows 0-2, on their masked tokens only
    wide = geometric_sequence_mask_weights(old, behav, mask, cap=1.05)
    assert wide.tolist() == [[1, 1, 0], [1, 1, 0], [1, 0, 0], [0, 0, 0]]


def test_rollout_corrections_table_and_tis_is_the_truncated_weight():
    old = torch.tensor([[LOG(0.5), LOG(0.9)]])
    behav = torch.tensor([[LOG(0.25), LOG(0.09)]])  # ratios 2 and 10
    mask = torch.ones(1, 2)
    assert set(ROLLOUT_CORRECTIONS) == {"tis", "mis_token", "mis_seq_geo", "icepop"}
    tis = ROLLOUT_CORRECTIONS["tis"](old, behav, mask, 2.0)
    assert torch.allclose(tis, torch.tensor([[2.0, 2.0]]))  # min(2, C), min(10, C) with C = 2
    assert ROLLOUT_CORRECTIONS["mis_token"](old, behav, mask, 2.0).tolist() == [[1.0, 0.0]]


def test_rollout_mismatch_by_hand():
    # d = learner - generator = +0.1, -0.2, and a masked garbage position
    old = torch.tensor([[-1.0, -2.2, 3.0]])
    behav = torch.tensor([[-1.1, -2.0, float("-inf")]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    k3, delta = rollout_mismatch(old, behav, mask)
    # k3 = e^d - 1 - d: e^0.1 - 1.1 = 0.0051709, e^-0.2 - 0.8 = 0.0187308
    assert k3.dtype == delta.dtype == torch.float64  # resolves k3 far below 1e-7
    assert torch.allclose(k3, torch.tensor([[0.0051709, 0.0187308, 0.0]]).double(), atol=1e-6)
    assert torch.allclose(delta, torch.tensor([[0.1, 0.2, 0.0]]).double(), atol=1e-6)
    same, none = rollout_mismatch(old, old, mask)
    assert float(same.abs().sum()) == 0 and float(none.sum()) == 0

import math

import pytest
import torch

from agentic_rl.algos.preference import dpo_loss, dpo_margins, sequence_logps


def test_sequence_logps_sum_only_mask_one_tokens_and_ignore_nan():
    logprobs = torch.tensor([[float("nan"), -1.0, -0.5, -2.0], [-3.0, -0.25, float("inf"), 0.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 1, 0, 0]])
    torch.testing.assert_close(sequence_logps(logprobs, mask), torch.tensor([-1.5, -0.25]))


def test_dpo_loss_hand_values_and_gradient():
    # pair 1: chosen log-ratio -1 - (-1.5) = 0.5, rejected -2 - (-1.5) = -0.5, margin 1
    # pair 2: chosen -3 - (-2) = -1, rejected -1 - (-2) = 1, margin -2
    pc = torch.tensor([-1.0, -3.0], requires_grad=True)
    pr = torch.tensor([-2.0, -1.0], requires_grad=True)
    rc, rr = torch.tensor([-1.5, -2.0]), torch.tensor([-1.5, -2.0])
    loss = dpo_loss(pc, pr, rc, rr, beta=0.5)
    # -log sigmoid(0.5 * 1) = log(1 + e^-0.5); -log sigmoid(0.5 * -2) = log(1 + e^1)
    torch.testing.assert_close(
        loss, torch.tensor([math.log1p(math.exp(-0.5)), math.log1p(math.exp(1.0))])
    )
    loss.sum().backward()
    # dL/d pc = -beta * sigmoid(-beta * margin); dL/d pr = +beta * sigmoid(-beta * margin)
    s = torch.sigmoid(torch.tensor([-0.5, 1.0]))
    torch.testing.assert_close(pc.grad, -0.5 * s)
    torch.testing.assert_close(pr.grad, 0.5 * s)
    torch.testing.assert_close(dpo_margins(pc, pr, rc, rr), torch.tensor([1.0, -2.0]))


def test_dpo_loss_is_log2_at_the_reference_and_reference_is_constant():
    logps = torch.tensor([-4.0, -7.0])
    ref = torch.tensor([-4.0, -7.0], requires_grad=True)
    loss = dpo_loss(logps, logps.flip(0), ref, ref.flip(0), beta=0.1)
    torch.testing.assert_close(loss, torch.full((2,), math.log(2.0)))
    assert not loss.requires_grad  # only the reference needs grad, and it is detached


def test_dpo_loss_rejects_non_positive_beta():
    x = torch.zeros(1)
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo_loss(x, x, x, x, beta=0.0)

"""Hand-computed checks for the GSPO loss and DAPO overlong shaping in agentic_rl.algos.losses."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.advantages import grpo_advantages
from agentic_rl.algos.losses import gspo_loss, overlong_filter_mask, overlong_soft_penalty

F64 = torch.float64
LN2 = math.log(2.0)


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


# ------------------------------------------------------------------------------------ GSPO


def test_gspo_hand_values_and_clipping():
    # row 0: masked log-ratios ln2, 0 -> mean ln2/2 -> s = sqrt(2) = 1.414214; A = +1:
    #   -min(1.414214, 1.0004) = -1.0004 (clipped above at 1 + 4e-4)
    # row 1: same s, A = -1: -min(-1.414214, -1.0004) = 1.414214 (pessimistic side, unclipped)
    # row 2: log-ratios -ln2, 0, 0 -> s = 2^(-1/3) = 0.793701; A = -2:
    #   -min(-1.587401, -0.9997 * 2 = -1.9994) = 1.9994 (clipped below at 1 - 3e-4)
    # row 3: mean log-ratio 1e-4 -> s = 1.000100005 inside [0.9997, 1.0004]; A = 3:
    #   -3.000300015, not clipped
    nan = math.nan
    logprobs = t([[LN2, 0.0, nan], [LN2, 0.0, nan], [-LN2, 0.0, 0.0], [2e-4, 0.0, nan]])
    old = torch.zeros(4, 3, dtype=F64)
    mask = t([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 0]])
    adv = t([1.0, -1.0, -2.0, 3.0])
    loss, clipped = gspo_loss(logprobs, old, adv, mask)
    close(loss, [-1.0004, math.sqrt(2.0), 1.9994, -3.000300015])
    assert clipped.tolist() == [True, False, True, False]


def test_gspo_custom_clip_range():
    # s = sqrt(2), A = 1, clip_high = 0.2: -min(1.414214, 1.2) = -1.2
    loss, clipped = gspo_loss(t([[LN2, 0.0]]), t([[0.0, 0.0]]), t([1.0]), t([[1, 1]]), 0.2, 0.2)
    close(loss, [-1.2])
    assert clipped.tolist() == [True]


def test_gspo_gradient_reaches_every_masked_token_through_the_mean():
    # on-policy: s = 1, L_i = -s_i A_i, ds_i/dlogp_t = s_i / n_i on masked tokens
    # row 0: n = 2, A = 2 -> dL/dlogp = -2 / 2 = -1 on both masked tokens, 0 on the NaN gap
    # row 1: n = 3, A = -3 -> +1 on each of the three tokens
    logprobs = t([[-1.0, math.nan, -2.0], [-0.5, -0.1, -0.3]]).requires_grad_()
    old = logprobs.detach().nan_to_num(0.0)
    mask = t([[1, 0, 1], [1, 1, 1]])
    loss, clipped = gspo_loss(logprobs, old, t([2.0, -3.0]), mask)
    close(loss, [-2.0, 3.0])
    assert not clipped.any()
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    close(grad, [[-1.0, 0.0, -1.0], [1.0, 1.0, 1.0]])


def test_gspo_sequence_without_masked_tokens_is_zero():
    logprobs = t([[math.nan, math.inf], [0.3, 0.0]]).requires_grad_()
    loss, clipped = gspo_loss(
        logprobs, torch.zeros(2, 2, dtype=F64), t([5.0, 1.0]), t([[0, 0], [0, 0]])
    )
    assert torch.equal(loss, torch.zeros(2, dtype=F64))
    assert not clipped.any()
    (grad,) = torch.autograd.grad(loss.sum(), logprobs)
    assert torch.equal(grad, torch.zeros(2, 2, dtype=F64))


def test_gspo_on_policy_loss_is_minus_advantage_and_zero_for_constant_groups():
    # Invariance: ratio 1 -> L_i = -A_i. Group 0 rewards [1, 0] -> GRPO A = (+-0.5)/0.707107 =
    # +-0.707107 (eps 0); group 1 rewards [1, 1] is constant -> A = 0 -> L = 0 exactly.
    torch.manual_seed(0)
    logprobs = -torch.rand(4, 5, dtype=F64)
    mask = t([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [0, 1, 1, 0, 1]])
    adv = grpo_advantages(t([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]), eps=0.0)
    loss, clipped = gspo_loss(logprobs, logprobs.clone(), adv, mask)
    r = 1 / math.sqrt(2.0)
    close(loss, [-r, r, 0.0, 0.0])
    assert torch.equal(loss[2:], torch.zeros(2, dtype=F64))
    assert not clipped.any()


# ------------------------------------------------------------------------- DAPO overlong


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        # L_max = 20, L_cache = 4 -> L_exp = 16
        (0, 0.0),
        (16, 0.0),  # L = L_exp: still no penalty
        (17, -0.25),  # (16 - 17) / 4
        (18, -0.5),  # (16 - 18) / 4
        (20, -1.0),  # L = L_max: (16 - 20) / 4
        (21, -1.0),  # beyond L_max
        (1000, -1.0),
    ],
)
def test_overlong_soft_penalty_boundaries(length, expected):
    out = overlong_soft_penalty(torch.tensor([length]), max_length=20, cache_length=4)
    assert out.dtype == torch.get_default_dtype()
    close(out, [expected])


def test_overlong_soft_penalty_batch_and_no_buffer():
    close(overlong_soft_penalty(torch.tensor([16, 17, 20, 21]), 20, 4), [0.0, -0.25, -1.0, -1.0])
    # cache 0: a hard cut at L_max
    close(overlong_soft_penalty(torch.tensor([20, 21]), 20, 0), [0.0, -1.0])
    with pytest.raises(ValueError):
        overlong_soft_penalty(torch.tensor([1]), 20, 21)
    with pytest.raises(ValueError):
        overlong_soft_penalty(torch.tensor([1]), 20, -1)


def test_overlong_filter_mask_zeroes_truncated_rows_and_keeps_dtype():
    mask = t([[1, 1, 0], [1, 0, 1], [0, 1, 1]])
    out = overlong_filter_mask(mask, torch.tensor([False, True, False]))
    assert out.dtype == F64
    assert torch.equal(out, t([[1, 1, 0], [0, 0, 0], [0, 1, 1]]))
    bool_mask = mask.bool()
    out_b = overlong_filter_mask(bool_mask, torch.tensor([True, False, False]))
    assert out_b.dtype == torch.bool
    assert out_b.tolist() == [[False, False, False], [True, False, True], [False, True, True]]

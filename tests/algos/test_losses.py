"""Hand-computed checks for agentic_rl.algos.losses."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.advantages import grpo_advantages
from agentic_rl.algos.losses import (
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    aggregate_loss,
    clipped_surrogate,
    gspo_loss,
    kl_penalty,
    overlong_filter_mask,
    overlong_soft_penalty,
    ppo_clip_loss,
    value_loss,
)

F64 = torch.float64
LN2 = math.log(2.0)


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


def grad_of(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(out.sum(), x)
    return g


# ---------------------------------------------------------------------------------- KL penalty

# x = logprobs - ref_logprobs = [0, ln2, -ln2, -30]
KL_CASES = {
    # k1 = x, d/dx = 1
    "k1": ([0.0, LN2, -LN2, -30.0], [1.0, 1.0, 1.0, 1.0]),
    # k2 = x^2 / 2: 0.5 * 0.480453 = 0.240227; d/dx = x
    "k2": ([0.0, 0.2402265, 0.2402265, 450.0], [0.0, LN2, -LN2, -30.0]),
    # k3 = exp(-x) - 1 + x: 0.5 - 1 + 0.693147 = 0.193147; 2 - 1 - 0.693147 = 0.306853;
    # at x = -30 (exp(20) after the log-ratio clamp) the value is clamped to 10 -> zero grad.
    # d/dx = 1 - exp(-x): 0, 0.5, -1, 0
    "k3": ([0.0, 0.1931472, 0.3068528, 10.0], [0.0, 0.5, -1.0, 0.0]),
}


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_kl_penalty_hand_values_and_gradients(estimator):
    value, grad = KL_CASES[estimator]
    logprobs = t([[0.0, LN2, -LN2, -30.0]]).requires_grad_()
    ref = torch.zeros(1, 4, dtype=F64)
    kl = kl_penalty(logprobs, ref, estimator)
    close(kl, [value])
    close(grad_of(kl, logprobs), [grad])


def test_kl_k3_is_clamped_from_above_and_below():
    # x = +25 -> exp(-20) - 1 + 20 ~ 19 -> 10. k3 is never negative, so only the upper clamp
    # binds in exact arithmetic; the lower bound guards rounding.
    kl = kl_penalty(t([[25.0, -25.0]]), torch.zeros(1, 2, dtype=F64), "k3")
    close(kl, [[10.0, 10.0]])


def test_kl_unknown_estimator_raises_with_name():
    with pytest.raises(ValueError, match="'k7'"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k7")


@pytest.mark.parametrize("estimator", KL_ESTIMATORS)
def test_kl_mask_zero_positions_do_not_matter_when_aggregated(estimator):
    torch.manual_seed(0)
    mask = t([[1, 0, 1, 0], [0, 1, 1, 1]])
    lp, ref = -torch.rand(2, 4, dtype=F64), -torch.rand(2, 4, dtype=F64)
    noise = torch.where(mask.bool(), 0.0, 50 * torch.randn(2, 4, dtype=F64))

    def run(shift: torch.Tensor, with_mask: bool) -> tuple[torch.Tensor, ...]:
        x = (lp + shift).requires_grad_()
        kl = kl_penalty(x, ref - 2 * shift, estimator, mask if with_mask else None)
        loss = aggregate_loss(kl, mask, "token-mean")
        return loss.detach(), grad_of(loss, x)

    for with_mask in (False, True):
        base = run(torch.zeros(2, 4, dtype=F64), with_mask)
        perturbed = run(noise, with_mask)
        assert all(torch.equal(a, b) for a, b in zip(base, perturbed, strict=True))
        assert not base[1][mask == 0].any()


def test_kl_with_mask_is_nan_safe_at_mask_zero():
    mask = t([[1, 0, 0]])
    lp = t([[-0.5, math.nan, -math.inf]]).requires_grad_()
    ref = t([[-0.5 - LN2, 0.0, 0.0]])
    kl = kl_penalty(lp, ref, "k3", mask)
    close(kl, [[0.1931472, 0.0, 0.0]])
    close(grad_of(kl, lp), [[0.5, 0.0, 0.0]])


# ----------------------------------------------------------------------------- PPO clip loss


def _lp(ratios: list[float]) -> torch.Tensor:
    return t([[math.log(r) for r in ratios]]).requires_grad_()


def test_ppo_clip_loss_hand_values_and_gradient():
    # rho = [1.5, 0.5, 1.5, 0.5], A = [1, 1, -1, -1], eps = 0.2
    # -min(1.5, 1.2) = -1.2 (clipped); -min(0.5, 0.8) = -0.5;
    # -min(-1.5, -1.2) = 1.5; -min(-0.5, -0.8) = 0.8 (clipped)
    # d/dlogp of -rho*A on unclipped tokens: -0.5 * 1 = -0.5; -1.5 * -1 = 1.5; clipped: 0
    logprobs = _lp([1.5, 0.5, 1.5, 0.5])
    old = torch.zeros(1, 4, dtype=F64)
    adv = t([[1.0, 1.0, -1.0, -1.0]])
    loss, clipped = ppo_clip_loss(logprobs, old, adv, torch.ones(1, 4))
    close(loss, [[-1.2, -0.5, 1.5, 0.8]])
    assert clipped.tolist() == [[True, False, False, True]]
    close(grad_of(loss, logprobs), [[0.0, -0.5, 1.5, 0.0]])


def test_ppo_clip_higher_asymmetric_bounds():
    # clip range [0.8, 1.28]: rho 1.25 (A=2) -> -2.5 unclipped; rho 1.3 (A=2) -> -1.28*2 = -2.56
    # rho 0.75 (A=-1) -> -min(-0.75, -0.8) = 0.8 clipped
    logprobs = _lp([1.25, 1.3, 0.75])
    adv = t([[2.0, 2.0, -1.0]])
    loss, clipped = ppo_clip_loss(
        logprobs, torch.zeros(1, 3, dtype=F64), adv, torch.ones(1, 3), clip_low=0.2, clip_high=0.28
    )
    close(loss, [[-2.5, -2.56, 0.8]])
    assert clipped.tolist() == [[False, True, True]]
    close(grad_of(loss, logprobs), [[-2.5, 0.0, 0.0]])


def test_ppo_dual_clip():
    # c = 3. rho 5, A=-1: standard loss max(5, 1.2) = 5 -> capped at 3 (clipped, zero grad)
    # rho 1.1, A=-2: 2.2 < cap 6 -> 2.2, grad -rho*A = 2.2
    # rho 5, A=+1: -1.2 (standard clip; dual clip only for A < 0)
    # rho 0.5, A=-1: 0.8 (standard clip) < cap 3
    logprobs = _lp([5.0, 1.1, 5.0, 0.5])
    adv = t([[-1.0, -2.0, 1.0, -1.0]])
    loss, clipped = ppo_clip_loss(
        logprobs, torch.zeros(1, 4, dtype=F64), adv, torch.ones(1, 4), dual_clip=3.0
    )
    close(loss, [[3.0, 2.2, -1.2, 0.8]])
    assert clipped.tolist() == [[True, False, True, True]]
    close(grad_of(loss, logprobs), [[0.0, 2.2, 0.0, 0.0]])


def test_ppo_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        z = torch.zeros(1, 1)
        ppo_clip_loss(z, z, z, torch.ones(1, 1), dual_clip=1.0)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_ppo_on_policy_ratio_one(dual_clip):
    torch.manual_seed(0)
    mask = (torch.rand(4, 7) > 0.3).to(F64)
    logprobs = (-torch.rand(4, 7, dtype=F64)).requires_grad_()
    adv = torch.randn(4, 7, dtype=F64)
    loss, clipped = ppo_clip_loss(logprobs, logprobs.detach(), adv, mask, dual_clip=dual_clip)
    # rho = 1: clipped and unclipped terms coincide, loss = -A; d(-rho*A)/dlogp = -A
    close(loss, -adv * mask)
    assert not clipped.any()
    close(grad_of(loss, logprobs), -adv * mask)


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_ppo_mask_zero_positions_change_nothing(mode):
    torch.manual_seed(0)
    mask = t([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [0, 1, 1, 0, 1]])
    lp, old = -torch.rand(3, 5, dtype=F64), -torch.rand(3, 5, dtype=F64)
    adv = torch.randn(3, 5, dtype=F64)
    noise = torch.where(mask.bool(), 0.0, 1e4 * torch.randn(3, 5, dtype=F64))
    noise[0, 2], noise[2, 0] = math.nan, -math.inf

    def run(shift: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = (lp + shift).requires_grad_()
        per_token, clipped = ppo_clip_loss(x, old - shift, adv + shift, mask, dual_clip=3.0)
        loss = aggregate_loss(per_token, mask, mode, max_tokens=5)
        return loss.detach(), per_token.detach(), clipped, grad_of(loss, x)

    base, perturbed = run(torch.zeros(3, 5, dtype=F64)), run(noise)
    assert all(torch.equal(a, b) for a, b in zip(base, perturbed, strict=True))
    assert not base[3][mask == 0].any()


# -------------------------------------------------------------------------------- value loss


def test_value_loss_hand_values_and_gradient():
    # (v, old, R) = (1.5, 1, 2): v_clip 1.2 -> 0.5 * max(0.25, 0.64) = 0.32, grad 0 (clip active)
    # (1.5, 1, 1): v_clip 1.2 -> 0.5 * max(0.25, 0.04) = 0.125, grad v - R = 0.5
    # (1.1, 1, 2): v_clip = v -> 0.5 * 0.81 = 0.405, grad v - R = -0.9
    # last position masked out -> 0
    values = t([[1.5, 1.5, 1.1, 7.0]]).requires_grad_()
    old, ret = t([[1.0, 1.0, 1.0, 0.0]]), t([[2.0, 1.0, 2.0, -3.0]])
    mask = t([[1, 1, 1, 0]])
    loss = value_loss(values, old, ret, mask, clip=0.2)
    close(loss, [[0.32, 0.125, 0.405, 0.0]])
    close(grad_of(loss, values), [[0.0, 0.5, -0.9, 0.0]])
    # unclipped: 0.5 * (v - R)^2 = 0.125, 0.125, 0.405
    close(value_loss(values, old, ret, mask, clip=None), [[0.125, 0.125, 0.405, 0.0]])


def test_value_loss_mask_zero_positions_change_nothing():
    mask = t([[1, 0, 1]])
    v = t([[0.3, 0.2, 0.9]])
    noise = t([[0.0, math.nan, 0.0]])
    x1, x2 = v.clone().requires_grad_(), (v + noise).requires_grad_()
    l1 = value_loss(x1, v - 0.5, v + 1.0, mask)
    l2 = value_loss(x2, v - 0.5 + noise, v + 1.0 - noise, mask)
    assert torch.equal(l1, l2)
    assert torch.equal(grad_of(l1, x1), grad_of(l2, x2))


# --------------------------------------------------------------------------- aggregation


PER_TOKEN = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]
MASK = [[1, 1, 0], [1, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 7.0 / 3.0),  # (1 + 2 + 4) / 3 tokens
        ("seq-mean-token-mean", (1.5 + 4.0 + 0.0) / 3.0),  # empty third row contributes 0
        ("seq-mean-token-sum-norm", 7.0 / (3.0 * 3.0)),  # sum / (max_tokens 3 * 3 sequences)
    ],
)
def test_aggregate_loss_hand_values(mode, expected):
    close(aggregate_loss(t(PER_TOKEN), t(MASK), mode, max_tokens=3), expected)


def test_aggregate_loss_explicit_counts():
    x, m = t(PER_TOKEN), t(MASK)
    close(aggregate_loss(x, m, "token-mean", num_tokens=14.0), 0.5)  # 7 / 14
    close(aggregate_loss(x, m, "seq-mean-token-mean", num_sequences=11), 0.5)  # 5.5 / 11
    close(aggregate_loss(x, m, "seq-mean-token-sum-norm", num_sequences=7, max_tokens=2), 0.5)


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_aggregate_loss_all_masked_is_zero_with_finite_grad(mode):
    x = torch.full((2, 3), math.nan, dtype=F64, requires_grad=True)
    loss = aggregate_loss(x, torch.zeros(2, 3), mode, max_tokens=3)
    assert loss.item() == 0.0
    assert torch.equal(grad_of(loss, x), torch.zeros(2, 3, dtype=F64))
    assert aggregate_loss(x, torch.zeros(2, 3), mode, num_tokens=0.0, max_tokens=3).item() == 0.0


def test_aggregate_loss_errors():
    x, m = torch.zeros(1, 2), torch.ones(1, 2)
    with pytest.raises(ValueError, match=r"token-mean.*seq-mean-token-mean"):
        aggregate_loss(x, m, "sum")
    with pytest.raises(ValueError, match="max_tokens"):
        aggregate_loss(x, m, "seq-mean-token-sum-norm")


@pytest.mark.parametrize("micro_size", [1, 2, 4])
@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
def test_gradient_accumulation_invariance(mode, micro_size):
    torch.manual_seed(0)
    b, tt = 8, 12
    lengths = [12, 1, 5, 0, 7, 3, 9, 2]
    mask = torch.zeros(b, tt, dtype=F64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1.0
    mask[0, 4] = mask[6, 2] = 0.0  # tool-observation gaps inside sequences
    per_token = torch.randn(b, tt, dtype=F64, requires_grad=True)

    full = aggregate_loss(per_token, mask, mode, max_tokens=tt)
    (full_grad,) = torch.autograd.grad(full, per_token)

    global_counts = {"num_sequences": b, "num_tokens": mask.sum().item(), "max_tokens": tt}
    chunks = zip(per_token.split(micro_size), mask.split(micro_size), strict=True)
    total = sum(aggregate_loss(x, m, mode, **global_counts) for x, m in chunks)
    (micro_grad,) = torch.autograd.grad(total, per_token)
    assert torch.allclose(full, total)
    assert torch.allclose(full_grad, micro_grad)


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


def test_policy_loss_table():
    assert POLICY_LOSSES["ppo"].fn is ppo_clip_loss and not POLICY_LOSSES["ppo"].sequence_level
    assert POLICY_LOSSES["gspo"].fn is gspo_loss and POLICY_LOSSES["gspo"].sequence_level


def test_clipped_surrogate_by_hand():
    """rho = 1.5, A = 1 (clip 0.2): max(-1.5, -1.2) = -1.2, clipped; rho = 0.5, A = 1:
    max(-0.5, -0.8) = -0.5, not clipped; rho = 0.5, A = -1: max(0.5, 0.8) = 0.8, clipped;
    rho = 1, A = 2: both -2, a tie, not clipped (its gradient is -A grad(rho))."""
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.0], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -1.0, 2.0])
    loss, clipped = clipped_surrogate(ratio, adv, 0.2, 0.2)
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 0.8, -2.0])
    assert clipped.tolist() == [True, False, True, False]
    loss.sum().backward()
    assert ratio.grad.tolist() == pytest.approx([0.0, -1.0, 0.0, -2.0])

"""CISPO, Clip-Cov, KL-Cov, GMPO and the turn-level ratio (algos/losses.py): hand-computed
values and gradients, and equality with the definitions as veRL's core_algos implements them
(compute_policy_loss_cispo, _clip_cov, _kl_cov, _geo_mean; volcengine/verl b178a3cd5), written
out here from the formulas; the turn ratio against GSPO and PPO, the two losses it generalises."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.losses import (
    POLICY_LOSSES,
    cispo_loss,
    clip_cov_loss,
    gmpo_loss,
    gspo_loss,
    kl_cov_loss,
    ppo_clip_loss,
    turn_ratio_loss,
)

F64 = torch.float64


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    torch.testing.assert_close(
        actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0
    )


def grad_of(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(out.sum(), x)
    return g


# ---- CISPO -------------------------------------------------------------------------------


def test_cispo_by_hand_every_token_keeps_its_gradient():
    # log-ratios 0, +0.5, -0.5: ratios 1, e^0.5 = 1.6487, e^-0.5 = 0.6065
    lp = t([[-1.0, -0.5, -2.0]]).requires_grad_()
    old = t([[-1.0, -1.0, -1.5]])
    adv = t([[1.0, 2.0, -1.0]])
    loss, clipped = cispo_loss(lp, old, adv, torch.ones(1, 3), clip_low=1.0, clip_high=0.2)
    # w = [1, 1.2 (capped), 0.6065 (no lower bound)]; L = -w A logp
    close(loss, [[1.0, 1.2, -math.exp(-0.5) * 2.0]])
    assert clipped.tolist() == [[False, True, False]]
    # dL/dlogp = -w A, also on the clipped token (PPO would give it 0)
    close(grad_of(loss, lp), [[-1.0, -2.4, math.exp(-0.5)]])
    low, clipped_low = cispo_loss(lp, old, adv, torch.ones(1, 3), clip_low=0.2, clip_high=0.2)
    close(low[0, 2], -0.8 * 2.0)  # w = max(0.6065, 0.8)
    assert clipped_low.tolist() == [[False, True, True]]


def test_cispo_masked_positions_are_zero_even_when_garbage():
    lp = t([[-1.0, float("nan")]]).requires_grad_()
    old = t([[-1.0, float("inf")]])
    loss, clipped = cispo_loss(lp, old, t([[1.0, 1.0]]), t([[1.0, 0.0]]))
    assert loss.tolist() == [[1.0, 0.0]] and not clipped[0, 1]
    assert grad_of(loss, lp).tolist() == [[-1.0, 0.0]]


def _verl_cispo(lp, old, adv, lo, hi):
    ratio = torch.exp((lp - old).clamp(-20, 20))
    return -ratio.clamp(1 - lo, 1 + hi).detach() * adv * lp


def test_cispo_equals_the_verl_definition():
    gen = torch.Generator().manual_seed(0)
    lp = (-torch.rand(3, 5, generator=gen, dtype=F64) * 3).requires_grad_()
    old = lp.detach() + 0.3 * torch.randn(3, 5, generator=gen, dtype=F64)
    adv = torch.randn(3, 5, generator=gen, dtype=F64)
    ours, _ = cispo_loss(lp, old, adv, torch.ones(3, 5), clip_low=10.0, clip_high=0.2)
    ref = _verl_cispo(lp, old, adv, 10.0, 0.2)
    close(ours, ref.detach())
    close(grad_of(ours, lp), grad_of(ref, lp))


# ---- Clip-Cov and KL-Cov -----------------------------------------------------------------

# Five tokens: mean logp = -1.44, mean A = 0.6, so Cov_t = (logp_t + 1.44)(A_t - 0.6) =
# [0.536, 2.496, 0.496, 0.876, 0.616].
LP = [[-0.1, -3.0, -0.2, -2.9, -1.0]]
ADV = [[1.0, -1.0, 1.0, 0.0, 2.0]]


def test_clip_cov_by_hand_detaches_in_band_tokens_not_already_clipped():
    lp = t(LP).requires_grad_()
    # token 1: log-ratio -0.5 (ratio 0.607 < 0.8) with A < 0: PPO-clipped; the others ratio 1
    old = t([[-0.1, -2.5, -0.2, -2.9, -1.0]])
    loss, detached = clip_cov_loss(
        lp, old, t(ADV), torch.ones(1, 5), 0.2, 0.2, cov_ratio=0.4, cov_low=0.6, cov_high=5.0
    )
    # band (0.6, 5): tokens 1, 3, 4; token 1 is clipped, so tokens 3 and 4 are eligible, and
    # floor(0.4 * 5) = 2 are picked: both, whatever the random order
    assert detached.tolist() == [[False, False, False, True, True]]
    close(loss, [[-1.0, 0.8, -1.0, 0.0, 0.0]])  # token 1: -clip(0.607) A = 0.8
    close(grad_of(loss, lp), [[-1.0, 0.0, -1.0, 0.0, 0.0]])  # token 4 (A = 2) has none left


def test_clip_cov_picks_at_least_one_and_at_random_among_the_eligible():
    lp, adv, mask = t(LP), t(ADV), torch.ones(1, 5)
    picks = set()
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        _, detached = clip_cov_loss(lp, lp, adv, mask, cov_ratio=1e-4, cov_low=0.5, generator=gen)
        assert int(detached.sum()) == 1  # max(1, floor(1e-4 * 5))
        picks.add(int(detached.flatten().nonzero()))
    assert picks == {0, 1, 3, 4}  # the four tokens with 0.5 < Cov < 5, never token 2 (0.496)


def test_clip_cov_with_nothing_in_band_is_the_ppo_loss():
    lp, old, adv = t(LP), t(LP) + 0.3, t(ADV)
    loss, detached = clip_cov_loss(lp, old, adv, torch.ones(1, 5), cov_low=10.0, cov_high=20.0)
    assert not detached.any()
    close(loss, ppo_clip_loss(lp, old, adv, torch.ones(1, 5))[0])


def test_kl_cov_by_hand_penalises_the_top_covariance_token():
    lp = t(LP).requires_grad_()
    old = t([[-0.1, -2.5, -0.2, -2.9, -1.0]])  # token 1: log-ratio -0.5
    loss, penalised = kl_cov_loss(lp, old, t(ADV), torch.ones(1, 5), cov_ratio=0.2, kl_coef=1.0)
    # k = max(1, floor(0.2 * 5)) = 1: the largest Cov is token 1's (2.496)
    assert penalised.tolist() == [[False, True, False, False, False]]
    r = math.exp(-0.5)
    close(loss, [[-1.0, r + 0.5, -1.0, 0.0, -2.0]])  # token 1: -A r + |log r|, no clip
    # d/dlogp (-A r + |log r|) = -A r + sign(log r) = r - 1 on token 1
    close(grad_of(loss, lp), [[-1.0, r - 1.0, -1.0, 0.0, -2.0]])


def test_kl_cov_is_the_plain_policy_gradient_at_ratio_one():
    lp = t(LP).requires_grad_()
    loss, _ = kl_cov_loss(lp, lp.detach(), t(ADV), torch.ones(1, 5), cov_ratio=0.4)
    close(grad_of(loss, lp), [[-1.0, 1.0, -1.0, 0.0, -2.0]])  # -A: the |log r| term adds 0


def _verl_cov(lp, adv, mask):
    m = mask > 0
    return (adv - adv[m].mean()) * (lp.detach() - lp.detach()[m].mean())


def test_kl_cov_and_clip_cov_equal_the_verl_definitions_with_padding():
    gen = torch.Generator().manual_seed(1)
    lp = (-torch.rand(4, 6, generator=gen, dtype=F64) * 3).requires_grad_()
    old = lp.detach() + 0.2 * torch.randn(4, 6, generator=gen, dtype=F64)
    adv = torch.randn(4, 6, generator=gen, dtype=F64)
    mask = torch.ones(4, 6)
    mask[1, 4:] = 0
    mask[3, 2:] = 0
    m = mask > 0
    cov = _verl_cov(lp, adv, mask)
    # KL-Cov: k = floor(0.2 * 18) = 3 largest covariances over the valid tokens
    valid = cov[m]
    top = torch.zeros(int(m.sum()), dtype=torch.bool)
    top[torch.topk(valid, 3).indices] = True
    chosen = torch.zeros_like(m)
    chosen[m] = top
    log_r = lp - old
    ref = torch.where(chosen, -adv * log_r.exp() + 2.0 * log_r.abs(), -adv * log_r.exp())
    ours, penalised = kl_cov_loss(lp, old, adv, mask, cov_ratio=0.2, kl_coef=2.0)
    assert torch.equal(penalised, chosen)
    close(ours, torch.where(m, ref, 0).detach())
    close(grad_of(ours, lp), grad_of(torch.where(m, ref, 0), lp))
    # Clip-Cov with cov_ratio 1: every eligible token (in band, not PPO-clipped) is detached
    r = log_r.exp()
    l1, l2 = -adv * r, -adv * r.clamp(0.8, 1.2)
    eligible = (cov > -0.5) & (cov < 0.5) & m & ~(l2 > l1)
    ref_cc = torch.where(eligible, 0, torch.maximum(l1, l2))
    ours_cc, detached = clip_cov_loss(lp, old, adv, mask, cov_ratio=1.0, cov_low=-0.5, cov_high=0.5)
    assert torch.equal(detached, eligible) and 0 < int(eligible.sum()) < int(m.sum())
    close(ours_cc, torch.where(m, ref_cc, 0).detach())


# ---- GMPO --------------------------------------------------------------------------------


def test_gmpo_by_hand():
    lp = t([[0.5, -0.1, 0.2], [-0.6, 0.5, 0.0]]).requires_grad_()
    old = torch.zeros(2, 3, dtype=F64)
    mask = t([[1, 1, 1], [1, 1, 0]])
    adv = t([1.0, -2.0])
    loss, clipped = gmpo_loss(lp, old, adv, mask, 0.4, 0.4)
    # seq 0 (A > 0): 0.5 -> 0.4 (clipped above); mean (0.4 - 0.1 + 0.2) / 3 = 1/6
    # seq 1 (A < 0): -0.6 -> -0.4 (clipped below), 0.5 kept (one-sided); mean 0.1 / 2 = 0.05
    close(loss, [-math.exp(1 / 6), 2.0 * math.exp(0.05)])
    assert clipped.tolist() == [[True, False, False], [True, False, False]]
    # unclipped tokens: dL/dlogp = -A rho / |y|; clipped and padded ones: 0
    g0, g1 = -math.exp(1 / 6) / 3, 2.0 * math.exp(0.05) / 2
    close(grad_of(loss, lp), [[0.0, g0, g0], [0.0, g1, 0.0]])


def test_gmpo_empty_sequence_and_zero_advantage():
    lp = t([[0.3, 0.0], [9.0, 9.0]])
    loss, clipped = gmpo_loss(lp, torch.zeros(2, 2, dtype=F64), t([0.0, 1.0]), t([[1, 1], [0, 0]]))
    assert loss.tolist() == [0.0, 0.0] and not clipped.any()


def _verl_gmpo(lp, old, adv_tokens, mask, lo, hi):
    d = lp - old
    sgn = torch.sign(adv_tokens)
    d_min = sgn * torch.min(sgn * d, sgn * d.clamp(-lo, hi))
    n = mask.sum(-1)
    ratio = torch.exp((d_min * mask).sum(-1) / (n + 1e-8))
    adv = (adv_tokens * mask).sum(-1) / (n + 1e-8)
    return -adv * ratio  # veRL then takes the mean over the sequences


def test_gmpo_equals_the_verl_definition():
    gen = torch.Generator().manual_seed(2)
    lp = (-torch.rand(4, 5, generator=gen, dtype=F64)).requires_grad_()
    old = lp.detach() + 0.5 * torch.randn(4, 5, generator=gen, dtype=F64)
    seq_adv = torch.randn(4, generator=gen, dtype=F64)
    mask = torch.ones(4, 5, dtype=F64)
    mask[2, 3:] = 0
    ref = _verl_gmpo(lp, old, seq_adv[:, None].expand(4, 5), mask, 0.4, 0.4)
    ours, _ = gmpo_loss(lp, old, seq_adv, mask, 0.4, 0.4)
    close(ours, ref.detach(), atol=1e-6)
    close(grad_of(ours.mean(), lp), grad_of(ref.mean(), lp), atol=1e-6)


# ---- turn-level ratio (ST-PPO / Turn-PPO) ------------------------------------------------


def test_turn_ratio_by_hand():
    # row 0: turn 0 = tokens 0-1, an observation (2), turn 1 = token 3, padding with garbage (4)
    # row 1: turn 0 = tokens 0-1, then a trained token outside every turn (2: own ratio)
    lp = t([[0.2, 0.0, 5.0, 0.3, 9.0], [-0.5, 0.1, 0.05, 0.0, 0.0]]).requires_grad_()
    old = torch.zeros(2, 5, dtype=F64)
    mask = t([[1, 1, 0, 1, 0], [1, 1, 1, 0, 0]])
    turns = torch.tensor([[0, 0, -1, 1, 1], [0, 0, -1, -1, -1]])
    adv = t([[1.0, 1.0, 0.0, 1.0, 0.0], [-1.0, -1.0, 2.0, 0.0, 0.0]])
    loss, clipped = turn_ratio_loss(lp, old, adv, mask, turns, 0.2, 0.2)
    # row 0: s_0 = exp((0.2 + 0) / 2) = e^0.1 (in band); s_1 = e^0.3 > 1.2 with A > 0: clipped
    # row 1: s_0 = exp((-0.5 + 0.1) / 2) = e^-0.2 >= 0.8 (in band); token 2: e^0.05, A = 2
    e1, e2 = math.exp(0.1), math.exp(-0.2)
    close(loss, [[-e1, -e1, 0, -1.2, 0], [e2, e2, -2 * math.exp(0.05), 0, 0]])
    assert clipped.tolist() == [[False] * 3 + [True, False], [False] * 5]
    # the turn's |k| tokens each carry -A s_k and ds_k/dlogp_t = s_k / |k|: their sum's gradient
    # is -A s_k on every token of the turn; 0 where clipped or off the mask
    e3 = 2 * math.exp(0.05)
    close(grad_of(loss, lp), [[-e1, -e1, 0, 0, 0], [e2, e2, -e3, 0, 0]])


def test_turn_ratio_clips_a_whole_turn_whose_tokens_moved_together():
    # each token's ratio e^0.15 is in PPO's band, both are; as one turn too. Then one token at
    # e^0.3 (out) and one at 0 (in): PPO clips one token, the turn ratio e^0.15 clips neither
    lp = t([[0.3, 0.0]])
    loss, clipped = turn_ratio_loss(
        lp,
        torch.zeros(1, 2, dtype=F64),
        t([[1.0, 1.0]]),
        t([[1, 1]]),
        torch.tensor([[0, 0]]),
        0.2,
        0.2,
    )
    _, token_clipped = ppo_clip_loss(lp, torch.zeros(1, 2, dtype=F64), t([[1.0, 1.0]]), t([[1, 1]]))
    assert token_clipped.tolist() == [[True, False]] and not clipped.any()
    close(loss, [[-math.exp(0.15)] * 2])


def test_turn_ratio_with_one_turn_a_row_is_gspo_and_with_one_token_a_turn_is_ppo():
    gen = torch.Generator().manual_seed(3)
    lp = (-torch.rand(3, 6, generator=gen, dtype=F64)).requires_grad_()
    old = lp.detach() + 2e-4 * torch.randn(3, 6, generator=gen, dtype=F64)
    mask = torch.ones(3, 6, dtype=F64)
    mask[1, 4:] = 0
    seq_adv = torch.randn(3, generator=gen, dtype=F64)
    adv = seq_adv[:, None].expand(3, 6) * mask
    one_turn = torch.where(mask > 0, 0, -1).long()
    per_token, _ = turn_ratio_loss(lp, old, adv, mask, one_turn, 3e-4, 4e-4)
    # GSPO's per-sequence loss = the mean of the turn loss over the row's tokens
    gspo, _ = gspo_loss(lp, old, seq_adv, mask, 3e-4, 4e-4)
    row_mean = per_token.sum(-1) / mask.sum(-1)
    close(row_mean, gspo.detach())
    close(grad_of(row_mean, lp), grad_of(gspo, lp))
    each_token = torch.arange(6).expand(3, 6)
    turn, _ = turn_ratio_loss(lp, old, adv, mask, each_token, 0.2, 0.28)
    ppo, _ = ppo_clip_loss(lp, old, adv, mask, 0.2, 0.28)
    close(turn, ppo.detach())
    close(grad_of(turn, lp), grad_of(ppo, lp))


# ---- the table ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cispo", "clip_cov", "kl_cov", "gmpo", "turn"])
def test_policy_loss_table_knobs_are_keywords_of_the_function(name):
    import inspect

    spec = POLICY_LOSSES[name]
    params = inspect.signature(spec.fn).parameters
    assert all(keyword in params for keyword, _ in spec.knobs)
    fields = {field for _, field in spec.knobs}
    assert set(spec.ratio_knobs) <= fields
    assert spec.sequence_level == (name == "gmpo")
    assert spec.needs_turns == ("turn_ids" in params) == (name == "turn")

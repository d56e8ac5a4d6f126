"""Hand-computed checks for agentic_rl.algos.advantages and agentic_rl.algos.masked."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.advantages import (
    discounted_returns,
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    multi_conversation_advantages,
    outcome_to_token_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    trr_pp_advantages,
    whiten_advantages,
)
from agentic_rl.algos.losses import LOSS_AGGREGATIONS, aggregate_loss, ppo_clip_loss
from agentic_rl.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten

F64 = torch.float64


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


# ----------------------------------------------------------------------------- masked helpers


def test_masked_sum_and_mean_ignore_nan_at_mask_zero():
    x = t([[1.0, 2.0, math.nan], [3.0, math.inf, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    close(masked_sum(x, mask), 6.0)  # 1 + 2 + 3
    close(masked_mean(x, mask), 2.0)  # 6 / 3
    close(masked_mean(x, mask, dim=1), [1.5, 3.0])


def test_masked_mean_empty_selection_is_zero_not_nan():
    x = t([[5.0, 6.0], [7.0, 8.0]])
    mask = t([[0, 0], [1, 0]])
    close(masked_mean(x, mask, dim=1), [0.0, 7.0])
    close(masked_mean(x, torch.zeros(2, 2)), 0.0)


def test_masked_var_population_and_unbiased():
    x = t([[1.0, 2.0, 99.0], [3.0, -5.0, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    # values 1, 2, 3: mean 2, squared deviations 1 + 0 + 1 = 2
    close(masked_var(x, mask), 2.0 / 3.0)
    close(masked_var(x, mask, unbiased=True), 1.0)


def test_masked_whiten_hand_values():
    x = t([[1.0, 2.0, 99.0], [3.0, math.nan, 0.0]])
    mask = t([[1, 1, 0], [1, 0, 0]])
    # mean 2, population std sqrt(2/3) -> (x - 2) / 0.8164966
    s = math.sqrt(2.0 / 3.0)
    close(masked_whiten(x, mask), [[-1 / s, 0.0, 0.0], [1 / s, 0.0, 0.0]])


def test_masked_whiten_constant_values_give_exact_zero():
    x = torch.full((3, 4), 0.7, dtype=torch.float32)
    mask = torch.ones(3, 4)
    mask[1, 2] = 0
    x[1, 2] = 123.0  # masked out, must not count as spread
    assert torch.equal(masked_whiten(x, mask), torch.zeros(3, 4))
    assert torch.equal(masked_whiten(x, torch.zeros(3, 4)), torch.zeros(3, 4))


def test_whiten_advantages_hand_values():
    adv = t([[4.0, 0.0], [2.0, 7.0]])
    mask = t([[1, 0], [1, 0]])
    # values 4, 2: mean 3, population std 1
    close(whiten_advantages(adv, mask), [[1.0, 0.0], [-1.0, 0.0]])


# ------------------------------------------------------------------------ sequence advantages


def test_grpo_hand_values_unbiased_std():
    # group [1, 0, 0, 0]: mean 0.25; sum sq dev = 0.5625 + 3 * 0.0625 = 0.75; var = 0.75/3
    # = 0.25; std = 0.5 -> (0.75 / 0.5, -0.25 / 0.5) = (1.5, -0.5)
    rewards = t([1.0, 0.0, 0.0, 0.0])
    ids = torch.tensor([0, 0, 0, 0])
    close(grpo_advantages(rewards, ids, eps=0.0), [1.5, -0.5, -0.5, -0.5])
    # eps enters as std + eps: 0.75 / 0.75 = 1, -0.25 / 0.75 = -1/3
    close(grpo_advantages(rewards, ids, eps=0.25), [1.0, -1 / 3, -1 / 3, -1 / 3])


def test_grpo_non_contiguous_unsorted_ids_and_singleton():
    # group 7: [2, 0] -> mean 1, unbiased std sqrt(2) -> +-1/sqrt(2)
    # group 3: [1, 4, 1] -> mean 2, sq dev 1 + 4 + 1 = 6, var 3 -> (-1, 2, -1)/sqrt(3)
    # group 42: singleton -> 0
    rewards = t([2.0, 1.0, 5.0, 0.0, 4.0, 1.0])
    ids = torch.tensor([7, 3, 42, 7, 3, 3])
    r2, r3 = 1 / math.sqrt(2), 1 / math.sqrt(3)
    close(grpo_advantages(rewards, ids, eps=0.0), [r2, -r3, 0.0, -r2, 2 * r3, -r3])


def test_grpo_without_std_equals_dr_grpo():
    rewards = t([1.0, 0.0, 0.0, 0.0, 3.0, 1.0])
    ids = torch.tensor([5, 5, 5, 5, 2, 2])
    expected = [0.75, -0.25, -0.25, -0.25, 1.0, -1.0]  # R - group mean (0.25 and 2)
    close(grpo_advantages(rewards, ids, scale_by_std=False), expected)
    close(dr_grpo_advantages(rewards, ids), expected)


def test_rloo_hand_values():
    # group [3, 1, 2]: baselines (1+2)/2=1.5, (3+2)/2=2.5, (3+1)/2=2 -> 1.5, -1.5, 0
    # group [1, 0, 0, 0]: 1 - 0 = 1, 0 - 1/3 = -1/3; singleton -> 0
    rewards = t([3.0, 1.0, 1.0, 2.0, 0.0, 0.0, 0.0, 9.0])
    ids = torch.tensor([0, 0, 1, 0, 1, 1, 1, 2])
    close(rloo_advantages(rewards, ids), [1.5, -1.5, 1.0, 0.0, -1 / 3, -1 / 3, -1 / 3, 0.0])


def test_integer_rewards_are_promoted():
    adv = dr_grpo_advantages(torch.tensor([1, 0]), torch.tensor([0, 0]))
    assert adv.dtype == torch.float32
    close(adv, [0.5, -0.5])


# The group-relative estimators with the signature (rewards [B], group_ids [B]) -> [B].
SEQUENCE_ADVANTAGES = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
}


CONSTANT_GROUPS = [
    ([0.7] * 8, torch.float32),
    ([1e3 + 0.1] * 4, torch.float32),
    ([0.1] * 3, torch.float64),
    ([-2.3] * 5, torch.float32),
]


@pytest.mark.parametrize("name", sorted(SEQUENCE_ADVANTAGES))
@pytest.mark.parametrize(("values", "dtype"), CONSTANT_GROUPS)
def test_constant_reward_groups_get_exact_zero(name, values, dtype):
    n = len(values)
    # The constant group (id 4) sits between the two members of an informative group (id 1).
    rewards = torch.tensor([1.0, *values, 0.0], dtype=dtype)
    ids = torch.tensor([1] + [4] * n + [1])
    adv = SEQUENCE_ADVANTAGES[name](rewards, ids)
    const = ids == 4
    assert torch.equal(adv[const], torch.zeros_like(adv[const]))
    assert (adv[~const] != 0).all()


def test_constant_group_rounding_residue_is_real_and_removed():
    rewards = torch.tensor([0.7] * 8)
    # Why the zero rule exists: the naive float32 mean leaves a ~6e-8 residue, which the
    # std division (std ~ 0) would amplify to O(1) advantages.
    assert ((rewards - rewards.mean()) != 0).all()
    ids = torch.zeros(8, dtype=torch.long)
    assert torch.equal(grpo_advantages(rewards, ids), torch.zeros(8))


def test_near_constant_group_is_not_zeroed():
    adv = grpo_advantages(t([1.0, 1.001]), torch.tensor([0, 0]), eps=0.0)
    close(adv, [-1 / math.sqrt(2), 1 / math.sqrt(2)])  # (-+0.0005) / (0.001/sqrt(2))


@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("name", sorted(SEQUENCE_ADVANTAGES))
def test_constant_rewards_give_exactly_zero_policy_gradient(name, mode):
    torch.manual_seed(0)
    rewards = torch.tensor([0.7] * 8 + [1e3 + 0.1] * 4)
    ids = torch.tensor([0] * 8 + [1] * 4)
    mask = (torch.rand(12, 6) > 0.3).float()
    logprobs = (-torch.rand(12, 6)).requires_grad_()
    old = logprobs.detach() + 0.1 * torch.randn(12, 6)  # off-policy: ratio != 1
    adv = outcome_to_token_advantages(SEQUENCE_ADVANTAGES[name](rewards, ids), mask)
    per_token, _ = ppo_clip_loss(logprobs, old, adv, mask)
    loss = aggregate_loss(per_token, mask, mode, max_tokens=6)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.equal(logprobs.grad, torch.zeros(12, 6))


def test_outcome_to_token_advantages():
    mask = t([[1, 1, 0], [0, 1, 1]])
    close(outcome_to_token_advantages(t([2.0, -1.0]), mask), [[2.0, 2.0, 0.0], [0.0, -1.0, -1.0]])


# --------------------------------------------------------------------------- token advantages


def test_discounted_returns_skip_gaps():
    # row 0: mask [1, 0, 1, 1], rewards [1, 50, 0, 2], gamma 0.5
    #   G3 = 2; G2 = 0 + 0.5 * 2 = 1; G0 = 1 + 0.5 * 1 = 1.5 (gap neither adds nor discounts)
    # row 1: mask [1, 1, 0, 0] rewards [0, 4, 9, 9] -> G1 = 4, G0 = 2
    rewards = t([[1.0, 50.0, 0.0, 2.0], [0.0, 4.0, 9.0, 9.0]])
    mask = t([[1, 0, 1, 1], [1, 1, 0, 0]])
    close(discounted_returns(rewards, mask, 0.5), [[1.5, 0.0, 1.0, 2.0], [2.0, 4.0, 0.0, 0.0]])


def test_reinforce_pp_hand_values_with_kl():
    mask = t([[1, 1, 0, 1], [1, 1, 0, 0]])
    kl = t([[0.1, 0.2, 9.0, 0.3], [0.4, 0.0, 9.0, 9.0]])
    # token rewards (kl_coef 0.5): row0 [-0.05, -0.1, -, -0.15 + 1]; row1 [-0.2, 0 + 0]
    # returns: row0 [0.70, 0.75, -, 0.85]; row1 [-0.2, 0.0]
    # mean 2.1 / 5 = 0.42; deviations 0.28, 0.33, 0.43, -0.62, -0.42
    # population var = (0.0784 + 0.1089 + 0.1849 + 0.3844 + 0.1764) / 5 = 0.1866
    s = math.sqrt(0.1866)
    expected = [[0.28 / s, 0.33 / s, 0.0, 0.43 / s], [-0.62 / s, -0.42 / s, 0.0, 0.0]]
    close(reinforce_pp_advantages(t([1.0, 0.0]), mask, kl, kl_coef=0.5), expected)


def test_reinforce_pp_discount_and_no_kl():
    # mask [1, 0, 1, 1], reward 2, gamma 0.5: G = [0.5, -, 1, 2]; mean 7/6
    # deviations -2/3, -1/6, 5/6; var (16 + 1 + 25) / 36 / 3 = 7/18
    mask = t([[1, 0, 1, 1]])
    s = math.sqrt(7 / 18)
    expected = [[-2 / 3 / s, 0.0, -1 / 6 / s, 5 / 6 / s]]
    close(reinforce_pp_advantages(t([2.0]), mask, None, kl_coef=0.1, gamma=0.5), expected)


def test_reinforce_pp_row_without_tokens():
    mask = t([[1, 1], [0, 0]])
    # row 0 returns [1, 1] (reward 1), row 1 empty: constant batch -> exact zeros
    adv = reinforce_pp_advantages(t([1.0, 5.0]), mask, None, kl_coef=0.0)
    assert torch.equal(adv, torch.zeros(2, 2, dtype=F64))


def test_reinforce_pp_baseline_hand_values():
    # group means 0.5 and 1 -> outcome advantages 0.5, -0.5, 0, 0
    # masked token values 0.5, 0.5, -0.5, 0, 0, 0: mean 1/12
    # deviations (5, 5, -7, -1, -1, -1)/12, var = 102/144/6 = 17/144 -> std sqrt(17)/12
    rewards = t([1.0, 0.0, 1.0, 1.0])
    ids = torch.tensor([0, 0, 1, 1])
    mask = t([[1, 1], [1, 0], [1, 1], [0, 1]])
    r = 1 / math.sqrt(17)
    expected = [[5 * r, 5 * r], [-7 * r, 0.0], [-r, -r], [0.0, -r]]
    close(reinforce_pp_baseline_advantages(rewards, ids, mask), expected)


def test_gae_with_tool_observation_gap():
    # mask [1, 1, 0, 1, 1] (position 2 = tool output), gamma 0.9, lam 0.5 (gamma*lam = 0.45)
    # t=4: delta = 1 + 0 - 0.8 = 0.2                       A4 = 0.2
    # t=3: delta = 0 + 0.9*0.8 - 0.7 = 0.02                A3 = 0.02 + 0.45*0.2 = 0.11
    # t=1: next masked is t=3: delta = 0.9*0.7 - 0.6 = 0.03 A1 = 0.03 + 0.45*0.11 = 0.0795
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04                    A0 = 0.04 + 0.45*0.0795 = 0.075775
    rewards = t([[0.0, 0.0, 99.0, 0.0, 1.0]])
    values = t([[0.5, 0.6, 77.0, 0.7, 0.8]])
    mask = t([[1, 1, 0, 1, 1]])
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.5)
    close(adv, [[0.075775, 0.0795, 0.0, 0.11, 0.2]])
    close(ret, [[0.575775, 0.6795, 0.0, 0.81, 1.0]])


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    # rewards only at the end: A_t = R - V_t; returns = R on every masked token
    rewards = t([[0.0, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 0.0]])
    values = t([[1.0, 2.0, 0.5, 9.0], [0.25, 1.0, 9.0, 9.0]])
    mask = t([[1, 1, 1, 0], [1, 1, 0, 0]])
    adv, ret = gae_advantages(rewards, values, mask)
    close(adv, [[2.0, 1.0, 2.5, 0.0], [1.75, 1.0, 0.0, 0.0]])
    close(ret, [[3.0, 3.0, 3.0, 0.0], [2.0, 2.0, 0.0, 0.0]])


def test_gae_outputs_are_detached():
    values = torch.ones(1, 3, requires_grad=True)
    adv, ret = gae_advantages(torch.ones(1, 3), values, torch.ones(1, 3))
    assert not adv.requires_grad and not ret.requires_grad


# -------------------------------------------------------------------- mask-0 invariance tests


def _mask_and_noise(b: int = 3, tt: int = 6):
    torch.manual_seed(1)
    mask = t([[1, 1, 0, 0, 1, 1], [0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    noise = torch.where(mask.bool(), 0.0, torch.randn(b, tt, dtype=F64) * 1e3)
    noise[0, 2] = math.nan
    noise[1, 5] = math.inf
    return mask, noise


def test_gae_ignores_mask_zero_positions():
    mask, noise = _mask_and_noise()
    rewards, values = torch.rand(3, 6, dtype=F64), torch.rand(3, 6, dtype=F64)
    a1, r1 = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.95)
    a2, r2 = gae_advantages(rewards + noise, values - noise, mask, gamma=0.9, lam=0.95)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)


def test_reinforce_pp_ignores_mask_zero_positions():
    mask, noise = _mask_and_noise()
    kl = torch.rand(3, 6, dtype=F64)
    rewards = t([1.0, -1.0, 3.0])
    a1 = reinforce_pp_advantages(rewards, mask, kl, kl_coef=0.1, gamma=0.9)
    a2 = reinforce_pp_advantages(rewards, mask, kl + noise, kl_coef=0.1, gamma=0.9)
    assert torch.equal(a1, a2)
    assert torch.equal(a1[mask == 0], torch.zeros_like(a1[mask == 0]))


@pytest.mark.parametrize("estimator", ["gae", "reinforce_pp"])
def test_token_advantages_mask_zero_noise_leaves_policy_gradient_unchanged(estimator):
    mask, noise = _mask_and_noise()
    base = torch.rand(3, 6, dtype=F64)

    def grad_for(perturb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if estimator == "gae":
            adv, _ = gae_advantages(base + perturb, base - perturb, mask, 0.9, 0.9)
        else:
            adv = reinforce_pp_advantages(t([1.0, 0.0, 2.0]), mask, base + perturb, 0.2)
        logprobs = (-base + perturb).requires_grad_()
        per_token, _ = ppo_clip_loss(logprobs, -base - 0.05, adv, mask)
        loss = aggregate_loss(per_token, mask, "token-mean")
        (grad,) = torch.autograd.grad(loss, logprobs)
        return loss.detach(), grad

    loss1, grad1 = grad_for(torch.zeros(3, 6, dtype=F64))
    loss2, grad2 = grad_for(noise)
    assert torch.equal(loss1, loss2) and torch.equal(grad1, grad2)
    assert torch.equal(grad1[mask == 0], torch.zeros_like(grad1[mask == 0]))


# ----------------------------------------------------------------------- multi-conversation


def test_multi_conversation_copies_each_sample_advantage_to_its_conversations():
    # GRPO on the final answers of 4 samples [1, 0, 0, 0]: (1.5, -0.5, -0.5, -0.5) (eps 0)
    sample_adv = grpo_advantages(t([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0]), eps=0.0)
    # sample 0 -> 3 conversations, sample 1 -> 2, sample 2 -> 1, sample 3 -> 2 (interleaved)
    conv = torch.tensor([0, 0, 1, 3, 0, 1, 2, 3])
    out = multi_conversation_advantages(sample_adv, conv)
    close(out, [1.5, 1.5, -0.5, -0.5, 1.5, -0.5, -0.5, -0.5])


def test_multi_conversation_is_detached():
    adv = t([0.5, -0.5]).requires_grad_()
    out = multi_conversation_advantages(adv, torch.tensor([1, 1, 0]))
    assert not out.requires_grad
    close(out, [-0.5, -0.5, 0.5])


# --------------------------------------------------------------------------------- TRR++


def test_trr_pp_whitens_tokens_within_each_task_role_bucket():
    # Every masked token carries its sequence's reward; each bucket's tokens are whitened with
    # their mean and unbiased (N - 1) variance, as veRL's masked_whiten in the AZR code.
    #   (0, 0): rows 0 (R=1, 2 tokens) and 2 (R=0, 1 token): tokens [1, 1, 0], mean 2/3,
    #           squared deviations 1/9 + 1/9 + 4/9 = 2/3, var (2/3) / 2 = 1/3, std 1/sqrt(3)
    #           -> (1/3) sqrt(3) = 1/sqrt(3) and (-2/3) sqrt(3) = -2/sqrt(3)
    #   (0, 1): rows 1 (R=2, 1 token), 5 (R=0, 2 tokens), 7 (R=1, no token): tokens [2, 0, 0],
    #           mean 2/3, deviations 16/9 + 4/9 + 4/9 = 24/9, var 4/3, std 2/sqrt(3)
    #           -> (4/3) / (2/sqrt(3)) = 2/sqrt(3), (-2/3) / (2/sqrt(3)) = -1/sqrt(3)
    #   (1, 0): row 3 alone (R=5, 2 tokens): constant -> 0
    #   (1, 1): rows 4 and 6, R=0.3 both: constant -> 0
    # (0, 1) and (1, 0) are different buckets although task + role is equal.
    rewards = t([1.0, 2.0, 0.0, 5.0, 0.3, 0.0, 0.3, 1.0])
    task = torch.tensor([0, 0, 0, 1, 1, 0, 1, 0])
    role = torch.tensor([0, 1, 0, 0, 1, 1, 1, 1])
    mask = t([[1, 1], [1, 0], [0, 1], [1, 1], [1, 1], [1, 1], [1, 0], [0, 0]])
    s3 = math.sqrt(3.0)
    expected = [
        [1 / s3, 1 / s3],
        [2 / s3, 0],
        [0, -2 / s3],
        [0, 0],
        [0, 0],
        [-1 / s3, -1 / s3],
        [0, 0],
        [0, 0],
    ]
    close(trr_pp_advantages(rewards, task, role, mask, eps=0.0), expected)


def test_trr_pp_constant_and_singleton_buckets_are_exactly_zero():
    rewards = t([0.7, 0.7, 0.7, 3.0])
    out = trr_pp_advantages(
        rewards, torch.tensor([2, 2, 2, 0]), torch.tensor([1, 1, 1, 1]), torch.ones(4, 3)
    )
    assert torch.equal(out, torch.zeros(4, 3, dtype=F64))


def test_trr_pp_eps_enters_inside_the_square_root():
    # one bucket, tokens [1, 0]: mean 0.5, unbiased var 0.5 -> (+-0.5) / sqrt(0.5 + 0.25)
    out = trr_pp_advantages(
        t([1.0, 0.0]), torch.tensor([4, 4]), torch.tensor([0, 0]), torch.ones(2, 1), eps=0.25
    )
    d = 0.5 / math.sqrt(0.75)
    close(out, [[d], [-d]])


def test_trr_pp_integer_rewards_and_no_gradient():
    rewards = torch.tensor([1, 0])
    out = trr_pp_advantages(rewards, torch.zeros(2), torch.zeros(2), torch.ones(2, 2))
    assert out.dtype == torch.float32 and not out.requires_grad
    close(out, [[math.sqrt(3) / 2] * 2, [-math.sqrt(3) / 2] * 2])  # +-0.5 / sqrt(1/3)

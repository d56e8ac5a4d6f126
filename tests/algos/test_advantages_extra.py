"""Hand-computed checks for the multi-conversation (MemAgent) and TRR++ (Absolute Zero)
advantage estimators."""

from __future__ import annotations

import math

import torch

from agentic_rl.algos.advantages import (
    grpo_advantages,
    multi_conversation_advantages,
    trr_pp_advantages,
)

F64 = torch.float64


def t(values, dtype=F64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def close(actual: torch.Tensor, expected, atol: float = 1e-6) -> None:
    expected_t = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected_t, atol=atol, rtol=0)


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


def test_trr_pp_per_task_role_buckets():
    # buckets (task, role):
    #   (0, 0): rewards 1, 0    -> mean 0.5, unbiased std sqrt(0.5) -> +-0.5/0.707107 = +-0.707107
    #   (0, 1): rewards 2, 0, 1 -> mean 1, sq dev 1 + 1 + 0 = 2, var 1 -> 1, -1, 0
    #   (1, 0): singleton 5     -> 0
    #   (1, 1): constant 0.3    -> 0
    # (0, 1) and (1, 0) are different buckets although task + role is equal.
    rewards = t([1.0, 2.0, 0.0, 5.0, 0.3, 0.0, 0.3, 1.0])
    task = torch.tensor([0, 0, 0, 1, 1, 0, 1, 0])
    role = torch.tensor([0, 1, 0, 0, 1, 1, 1, 1])
    mask = t([[1, 1], [1, 0], [0, 1], [1, 1], [1, 1], [1, 1], [1, 0], [0, 0]])
    r = 0.5 / math.sqrt(0.5)
    expected = [[r, r], [1.0, 0], [0, -r], [0, 0], [0, 0], [-1.0, -1.0], [0, 0], [0, 0]]
    close(trr_pp_advantages(rewards, task, role, mask, eps=0.0), expected)


def test_trr_pp_constant_and_singleton_buckets_are_exactly_zero():
    rewards = t([0.7, 0.7, 0.7, 3.0])
    out = trr_pp_advantages(
        rewards, torch.tensor([2, 2, 2, 0]), torch.tensor([1, 1, 1, 1]), torch.ones(4, 3)
    )
    assert torch.equal(out, torch.zeros(4, 3, dtype=F64))


def test_trr_pp_eps_enters_as_std_plus_eps():
    # one bucket [1, 0]: (+-0.5) / (0.707107 + 0.25) = +-0.522408
    out = trr_pp_advantages(
        t([1.0, 0.0]), torch.tensor([4, 4]), torch.tensor([0, 0]), torch.ones(2, 1), eps=0.25
    )
    d = 0.5 / (math.sqrt(0.5) + 0.25)
    close(out, [[d], [-d]])

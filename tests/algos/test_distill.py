"""On-policy distillation's advantage (algos/distill.py), by hand."""

import math

import pytest
import torch

from agentic_rl.algos.distill import reverse_kl_advantages


def test_reverse_kl_advantages_by_hand():
    # student logprobs log 0.5, log 0.1, log 0.4; teacher log 0.25, log 0.4, log 0.4
    student = torch.tensor([[math.log(0.5), math.log(0.1), math.log(0.4), 0.0]])
    teacher = torch.tensor([[math.log(0.25), math.log(0.4), math.log(0.4), float("nan")]])
    mask = torch.tensor([[1.0, 1, 1, 0]])
    # pure distillation (A = 0): A' = -d = -(log s - log t) = [-log 2, log 4, 0]
    adv = reverse_kl_advantages(torch.zeros(1, 4), student, teacher, mask)
    torch.testing.assert_close(adv, torch.tensor([[-math.log(2), math.log(4), 0.0, 0.0]]))
    # with a task advantage of 1 and coef 0.5: 1 - 0.5 d
    rl = reverse_kl_advantages(torch.ones(1, 4), student, teacher, mask, coef=0.5)
    expected = [[1 - 0.5 * math.log(2), 1 + 0.5 * math.log(4), 1.0, 0.0]]
    torch.testing.assert_close(rl, torch.tensor(expected))


def test_reverse_kl_advantages_carry_no_gradient_and_refuse_negative_coef():
    student = torch.zeros(1, 2, requires_grad=True)
    adv = reverse_kl_advantages(torch.zeros(1, 2), student, torch.zeros(1, 2), torch.ones(1, 2))
    assert not adv.requires_grad
    with pytest.raises(ValueError, match="coef"):
        reverse_kl_advantages(torch.zeros(1, 2), student, student, torch.ones(1, 2), coef=-1)


def test_the_policy_gradient_of_the_distill_advantage_is_the_reverse_kl_gradient():
    # A 3-token vocabulary, one step: E_{a~pi}[-A'(a) grad log pi(a)] with A' = -(log pi - log q)
    # must equal grad KL(pi || q) computed exactly over the vocabulary.
    logits = torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64, requires_grad=True)
    q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    logp = torch.log_softmax(logits, -1)
    kl = (logp.exp() * (logp - q.log())).sum()
    (exact,) = torch.autograd.grad(kl, logits, retain_graph=True)
    expected = torch.zeros(3, dtype=torch.float64)
    for a in range(3):  # the expectation, summed exactly over the three possible samples
        adv = reverse_kl_advantages(
            torch.zeros(1, 1, dtype=torch.float64),
            logp[a].reshape(1, 1),
            q[a].log().reshape(1, 1),
            torch.ones(1, 1),
        )
        (g,) = torch.autograd.grad(-adv[0, 0] * logp[a], logits, retain_graph=True)
        expected += logp[a].exp().detach() * g
    torch.testing.assert_close(expected, exact)

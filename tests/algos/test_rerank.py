"""RMM's reranker math (algos/rerank.py), hand-computed."""

from __future__ import annotations

import math

import torch

from agentic_rl.algos.rerank import citation_reinforce_loss, gumbel_top_m, residual_scores


def test_residual_scores():
    q = torch.tensor([1.0, 0.0])
    memories = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    w_q = torch.tensor([[0.0, 0.0], [1.0, 0.0]])  # q' = [1, 1]
    assert residual_scores(q, memories, w_q, torch.zeros(2, 2)).tolist() == [1.0, 1.0]
    w_m = torch.tensor([[1.0, 0.0], [0.0, 0.0]])  # m'_0 = [2, 0], m'_1 = [0, 1]
    assert residual_scores(q, memories, w_q, w_m).tolist() == [2.0, 1.0]


def test_citation_reinforce_loss():
    # softmax([ln 3, 0]) = [0.75, 0.25]; both picked, first cited; baseline 0.5:
    # L = -(1/2) [(1 - 0.5) ln 0.75 + (-1 - 0.5) ln 0.25] = -0.96780
    scores = torch.tensor([math.log(3.0), 0.0], requires_grad=True)
    loss = citation_reinforce_loss(
        scores, torch.tensor([0, 1]), torch.tensor([1.0, -1.0]), 0.5, 1.0
    )
    expected = -0.5 * (0.5 * math.log(0.75) - 1.5 * math.log(0.25))
    assert math.isclose(loss.item(), expected, rel_tol=1e-5)
    loss.backward()
    assert scores.grad[0] < 0  # descending raises the cited memory's score


def test_gumbel_top_m_without_noise_is_top_m():
    scores = torch.tensor([0.1, 3.0, -1.0, 2.0])
    assert gumbel_top_m(scores, 2, 0.5, None).tolist() == [1, 3]
    g = torch.Generator().manual_seed(0)
    picked = gumbel_top_m(scores, 3, 0.5, g)
    assert len(set(picked.tolist())) == 3

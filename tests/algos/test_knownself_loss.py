"""KnownSelf's DPO + NLL loss, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.knownself import dpo_nll_loss


def test_dpo_nll_by_hand():
    chosen, rejected = torch.tensor([-4.0, -2.0]), torch.tensor([-6.0, -1.0])
    ref_c, ref_r = torch.tensor([-4.0, -3.0]), torch.tensor([-6.0, -1.0])
    tokens = torch.tensor([2.0, 4.0])
    loss = dpo_nll_loss(chosen, rejected, ref_c, ref_r, tokens, beta=0.5, nll_coef=1.0)
    # pair 1: margin 0 -> log 2; NLL 4 / 2 = 2
    assert loss[0].item() == pytest.approx(math.log(2) + 2.0)
    # pair 2: margin (−2 + 3) − 0 = 1 -> -log sigmoid(0.5) = 0.474077; NLL 2 / 4 = 0.5
    assert loss[1].item() == pytest.approx(0.474077 + 0.5, abs=1e-6)
    no_nll = dpo_nll_loss(chosen, rejected, ref_c, ref_r, tokens, beta=0.5, nll_coef=0.0)
    assert no_nll[0].item() == pytest.approx(math.log(2))

"""optim.micro_batch_tokens: micro-batches within a token budget, counted as the pass runs them
(a group's shared prompt once when packed, padded rows otherwise); by hand, the forwards of a
real update and warm start kept within it, and the same weights as without it."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import RowTokens, collate, micro_batch_bounds, row_tokens
from agentic_rl.learner.update import update
from agentic_rl.train.sft import train_sft
from agentic_rl.types import Trajectory


def test_row_tokens_and_cost_by_hand():
    ids = torch.tensor([[1, 2, 3, 4, 0], [1, 2, 3, 5, 6], [1, 2, 9, 0, 0], [7, 2, 9, 0, 0]])
    mask = (ids > 0).long()
    tokens = row_tokens(ids, mask, packed=True)
    assert tokens.lengths == [4, 5, 3, 3]
    assert tokens.shared == [0, 3, 2, 0]  # leading tokens in common with the row before
    assert tokens.cost(0, 4) == 4 + (5 - 3) + (3 - 2) + 3
    assert tokens.cost(1, 3) == 5 + 1  # the micro-batch's first row counts whole
    assert tokens.cost(2, 2) == 0
    padded = row_tokens(ids, mask, packed=False)
    assert padded.cost(0, 4) == 4 * 5 and padded.cost(2, 4) == 2 * 3


def test_bounds_within_a_token_budget_by_hand():
    flat = RowTokens([5, 5, 5, 9], [0, 0, 0, 0], packed=True)
    assert micro_batch_bounds(4, 8, tokens=flat, max_tokens=10) == [(0, 2), (2, 3), (3, 4)]
    # the row limit still holds; a 9-token row alone is over a budget of 8 and runs alone
    assert micro_batch_bounds(4, 1, tokens=flat, max_tokens=100) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert micro_batch_bounds(4, 8, tokens=flat, max_tokens=8) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # a group's prompt counted once: 10 + 3 x 2 = 16 tokens for four rows
    group = RowTokens([10, 10, 10, 10], [0, 8, 8, 8], packed=True)
    assert micro_batch_bounds(4, 8, tokens=group, max_tokens=16) == [(0, 4)]
    assert micro_batch_bounds(4, 8, tokens=group, max_tokens=15) == [(0, 3), (3, 4)]
    # padded: 2 rows x 9 = 18 > 16, so the long row goes alone
    padded = RowTokens([5, 5, 5, 9], [0, 0, 0, 0], packed=False)
    assert micro_batch_bounds(4, 8, tokens=padded, max_tokens=16) == [(0, 3), (3, 4)]
    # whole trees where they fit in the budget: trees [0, 0, 1, 1, 1], 4 tokens a row
    rows = RowTokens([4] * 5, [0] * 5, packed=True)
    trees = [0, 0, 1, 1, 1]
    assert micro_batch_bounds(5, 8, trees, rows, max_tokens=12) == [(0, 2), (2, 5)]
    assert micro_batch_bounds(5, 8, trees, rows, max_tokens=8) == [(0, 2), (2, 4), (4, 5)]
    assert micro_batch_bounds(5, 8, trees, rows, max_tokens=0) == [(0, 5)]
    with pytest.raises(ValueError, match="RowTokens"):
        micro_batch_bounds(4, 8, max_tokens=10)


def _groups_with_long_prompts() -> list[Trajectory]:
    """Three groups of four rows; each group's rows share a 20-token prompt."""
    g = torch.Generator().manual_seed(0)
    out = []
    for group in range(3):
        prompt = torch.randint(10, 1000, (20,), generator=g).tolist()
        for i in range(4):
            answer = torch.randint(10, 1000, (3 + i + group,), generator=g).tolist()
            out.append(
                Trajectory(
                    token_ids=prompt + answer,
                    loss_mask=[0] * 20 + [1] * len(answer),
                    logprobs=[0.0] * (20 + len(answer)),
                    prompt_length=20,
                    turn_spans=[(20, 20 + len(answer))],
                    step_rewards=[],
                    reward=float(i % 2),
                    group_id=f"g{group}",
                )
            )
    return out


def _recording(model: torch.nn.Module) -> list[int]:
    """The tokens of every forward the model's decoder runs (packed rows: one row)."""
    seen: list[int] = []
    original = model.model.forward
    model.model.forward = functools.wraps(original)(
        lambda *a, _f=original, **k: seen.append(k["input_ids"].numel()) or _f(*a, **k)
    )
    return seen


@pytest.mark.parametrize("share", [True, False])
def test_update_within_the_budget_gives_the_same_weights(tiny, share):
    trajs = _groups_with_long_prompts()
    models, forwards = [], []
    for budget in (0, 32):
        cfg = load_config(
            None,
            [
                "model.name=tiny",
                "optim.micro_batch_size=4",
                f"optim.micro_batch_tokens={budget}",
                f"model.share_prefix={share}",
                "algo.ppo_mini_batches=2",  # pi_old is recomputed: a no-grad pass as well
            ],
        )
        model = copy.deepcopy(tiny)
        seen = _recording(model)
        batch = collate(trajs, 0)
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=1.0), batch, cfg)
        models.append(model)
        forwards.append(seen)
    unlimited, limited = forwards
    longest = max(len(t.token_ids) for t in trajs)
    assert max(unlimited) > 32  # without the budget some forward is larger
    assert all(n <= max(32, longest) for n in limited) and len(limited) > len(unlimited)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    moved = zip(tiny.parameters(), models[0].parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in moved)


def test_warm_start_within_the_budget_gives_the_same_gradient(tiny):
    trajs = _groups_with_long_prompts()[::3]  # rows of different groups: little shared
    models, forwards, losses = [], [], []
    for budget in (0, 40):
        model = copy.deepcopy(tiny)
        seen = _recording(model)
        # lr 0: the one step leaves the weights and its gradient in .grad (AdamW's first step
        # is about lr x sign(g), which would hide or magnify rounding on near-zero gradients)
        out = train_sft(
            model, trajs, 0, lr=0.0, batch_size=4, micro_batch_size=4,
            micro_batch_tokens=budget, share_prefix=True,
        )  # fmt: skip
        models.append(model)
        forwards.append(seen)
        losses.append(out["first_loss"])
    assert max(forwards[0]) > 40 and max(forwards[1]) <= 40 and len(forwards[1]) > 1
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-4)


def test_config_refuses_a_budget_that_cannot_act():
    with pytest.raises(ConfigError, match="optim.micro_batch_tokens must be >= 0"):
        load_config(None, ["optim.micro_batch_tokens=-1"])
    with pytest.raises(ConfigError, match="fsdp2 does not support optim.micro_batch_tokens"):
        load_config(None, ["learner.strategy=fsdp2", "optim.micro_batch_tokens=4096"])
    assert load_config(None, ["optim.micro_batch_tokens=4096"]).optim.micro_batch_tokens == 4096

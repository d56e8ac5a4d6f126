"""Batch whitening over the rows that train (issue 31, item 7): DAPO's overlong filter masks
truncated episodes out of the loss before the advantages, so PPO's and REINFORCE++'s batch
whitening sees only the trained rows and their advantages are zero-mean, unit-variance."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.learner.batch import Episodes
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.setup import build
from agentic_rl.types import Trajectory


def _episode(n: int, reward: float, group: str, truncated: bool) -> list[Trajectory]:
    ids = [1, 2, 3, *[(11 * n + k) % 90 + 10 for k in range(n)]]
    mask = [0, 0, 0, *[1] * n]
    sample = Trajectory(
        ids,
        mask,
        [0.0] * len(ids),
        prompt_length=3,
        turn_spans=[(3, 3 + n)],
        step_rewards=[reward],
        reward=reward,
        group_id=group,
        truncated=truncated,
    )
    return [sample]


@pytest.mark.parametrize("estimator", ["reinforce_pp", "reinforce_pp_baseline"])
def test_whitening_leaves_out_the_overlong_filtered_rows(estimator):
    cfg = load_config(
        None,
        ["model.name=tiny", f"algo.name={estimator}", "filters.overlong_filter=true"],
        smoke=True,
    )
    setup = build(cfg)
    # the truncated (long, high-reward) episode would pull the whitening mean up
    rows = [
        (4, 0.0, "a", False),
        (5, 1.0, "a", False),
        (6, 0.0, "b", False),
        (12, 1.0, "b", True),
        (7, 1.0, "b", False),
    ]
    episodes = Episodes([_episode(*row) for row in rows], [])
    batch = prepare_batch(setup, episodes)
    trained = batch.loss_mask > 0
    assert not trained[3].any()  # the truncated row is out of the loss
    adv = batch.advantages[trained]
    assert float(adv.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(adv.var(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    assert torch.all(batch.advantages[3] == 0)

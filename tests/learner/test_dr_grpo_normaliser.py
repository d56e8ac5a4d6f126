"""Dr. GRPO's constant normaliser is the most tokens a training row can generate (issue 31,
item 10), not rollout.max_total_tokens, which also counts the observations: raising the
observation budget must not shrink the gradient."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import max_sample_tokens
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import update
from agentic_rl.model.load import tiny_model
from agentic_rl.types import Trajectory

DR_GRPO = ["model.name=tiny", "algo.name=dr_grpo", "algo.ppo_mini_batches=1", "algo.clip_high=0.2"]


def test_the_most_a_row_can_generate_per_mode():
    episode = load_config(None, ["rollout.max_turns=3", "rollout.max_tokens_per_turn=16"])
    assert max_sample_tokens(episode.rollout) == 48  # min(400, 3 x 16)
    step = load_config("gigpo_gridworld").rollout  # one step (turn) a row
    assert max_sample_tokens(step) == step.max_tokens_per_turn
    with pytest.raises(ConfigError, match="seq-mean-token-sum-norm .*rollout.mode=memory"):
        load_config("memagent", ["algo.loss_agg="])


@pytest.mark.parametrize("total", [320, 640])
def test_the_update_divides_by_it_whatever_the_observation_budget(total):
    cfg = load_config(
        None,
        [
            *DR_GRPO,
            "rollout.max_turns=2",
            "rollout.max_tokens_per_turn=16",
            f"rollout.max_total_tokens={total}",
        ],
    )
    model = tiny_model(128, seed=0)
    rows = [([1, 2, 11, 12, 13], 1.0), ([1, 2, 14, 15, 16, 17, 18], 0.0)]
    batch = collate(
        [
            Trajectory(
                ids,
                [0, 0] + [1] * (len(ids) - 2),
                [0.0] * len(ids),
                prompt_length=2,
                reward=r,
                group_id="g",
            )
            for ids, r in rows
        ],
        0,
    )
    compute_advantages(batch, cfg.algo)  # A = R - mean = +-0.5 on 3 and 5 tokens
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    loss = update(model, optimizer, batch, cfg)["loss"]
    # ratio 1: L = -sum_{b,t} A / (max_tokens x N) = -(0.5 x 3 - 0.5 x 5) / (32 x 2)
    assert loss == pytest.approx(1.0 / (32 * 2), rel=1e-5)

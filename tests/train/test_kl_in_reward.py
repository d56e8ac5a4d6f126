"""KL in the reward is taken against the learner's pi_old, recomputed before the advantages (as
veRL does), never against the generator's behaviour logprobs (issue 31, item 1).

The behaviour logprobs here are the learner's + 0.1 nats on every sampled token, as top-p
sampling's renormalised distribution reports them; the reference is the policy itself, so the
true KL to it is 0."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algos.advantages import reinforce_pp_advantages
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner.batch import Episodes, collate
from agentic_rl.learner.update import forward_no_grad, sampling_temperature, update
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.setup import build, make_optimizer
from agentic_rl.types import Trajectory

KL_IN_REWARD = [
    "model.name=tiny",
    "trainer.progress=false",
    "algo.name=reinforce_pp",
    "algo.kl_coef=0.5",
    "algo.kl_in_reward=true",
    "rollout.top_p=0.9",
]
SHIFT = 0.1  # behaviour - learner logprob on every sampled token (nats)


def _trajectories(logprobs: list[list[float]] | None = None) -> list[Trajectory]:
    """Four rows of different lengths (the KL sums over tokens, so a bias shows per length)."""
    out = []
    for i, (n, reward) in enumerate([(3, 1.0), (6, 0.0), (9, 1.0), (12, 0.0)]):
        ids = [1, 2, 3, *[(7 * i + k) % 90 + 10 for k in range(n)]]
        mask = [0, 0, 0, *[1] * n]
        lp = logprobs[i][: len(ids)] if logprobs else [0.0] * len(ids)
        out.append(
            Trajectory(
                ids,
                mask,
                lp,
                prompt_length=3,
                turn_spans=[(3, 3 + n)],
                step_rewards=[reward],
                reward=reward,
                group_id=f"g{i // 2}",
            )
        )
    return out


def _episodes(setup) -> Episodes:
    """The rows with behaviour logprobs = the learner's + SHIFT on the sampled tokens."""
    cfg = setup.cfg
    plain = collate(_trajectories(), setup.tokenizer.pad_token_id)
    learner, _ = forward_no_grad(setup.policy, plain, 64, 8, temperature=sampling_temperature(cfg))
    behav = torch.where(plain.loss_mask > 0, learner + SHIFT, 0)
    return Episodes([[t] for t in _trajectories(behav.tolist())], [])


def test_the_kl_reward_of_a_policy_equal_to_its_reference_is_zero():
    setup = build(load_config(None, KL_IN_REWARD, smoke=True))
    batch = prepare_batch(setup, _episodes(setup))
    # KL(pi || ref) = 0: the advantages are REINFORCE++'s without a KL term; charged from the
    # behaviour logprobs every token would pay k3(0.1) = 0.0048 nats
    expected = reinforce_pp_advantages(batch.rewards, batch.loss_mask, None, 0.0)
    torch.testing.assert_close(batch.advantages, expected, atol=1e-4, rtol=0)
    # pi_old is the learner's (recomputed), the behaviour logprobs are kept beside it
    assert batch.old_recomputed
    gap = (batch.behav_logprobs - batch.old_logprobs)[batch.loss_mask > 0]
    torch.testing.assert_close(gap, torch.full_like(gap, SHIFT), atol=1e-4, rtol=0)


def test_the_update_reuses_that_pi_old_and_measures_the_mismatch_against_it():
    setup = build(load_config(None, KL_IN_REWARD, smoke=True))
    batch = prepare_batch(setup, _episodes(setup))
    recomputed = batch.old_logprobs.clone()
    metrics = update(setup.policy, make_optimizer(setup), batch, setup.cfg)
    assert torch.equal(batch.old_logprobs, recomputed)  # not recomputed a second time
    # d = pi_old - pi_behav = -0.1 on every token: k3 = exp(d) - 1 - d
    assert metrics["mismatch_k3"] == pytest.approx(math.exp(-SHIFT) - 1 + SHIFT, rel=1e-3)


def test_without_a_learner_pi_old_the_kl_reward_is_refused_where_the_generator_differs():
    bypass = [*KL_IN_REWARD, "algo.recompute_old_logprobs=false"]
    with pytest.raises(ConfigError) as err:
        load_config(None, bypass)
    message = str(err.value)
    assert "algo.kl_in_reward" in message and "algo.recompute_old_logprobs=false" in message
    assert "rollout.top_p=0.9" in message
    # the generator scores the learner's own distribution: its logprobs are pi_old
    same = [o for o in bypass if not o.startswith("rollout.top_p")]
    assert load_config(None, same).algo.kl_in_reward

"""Turn-level credit through the trainer's update half (`prepare_batch`, `update_policy`) on the
tiny model, with hand-made multi-turn episodes: MT-GRPO trains where episode-level GRPO has no
signal (equal outcomes, different step rewards), and Turn-PPO's critic (shared or separate)
is read and trained at each turn's first token."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.learner.batch import Episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.loop import update_policy
from agentic_rl.train.setup import build, make_optimizer
from agentic_rl.types import Trajectory

ONE_STEP = ["algo.ppo_mini_batches=1", "algo.clip_high=0.2"]


def episode(turns: list[int], step_rewards: list[float], group: str) -> Trajectory:
    """2 prompt tokens, then turns of the given lengths (sampled tokens), each followed by a
    1-token observation except the last."""
    ids, mask, spans = [5, 6], [0, 0], []
    for k, length in enumerate(turns):
        spans.append((len(ids), len(ids) + length))
        ids += [40 + 7 * k + i for i in range(length)]
        mask += [1] * length
        if k < len(turns) - 1:
            ids.append(99)
            mask.append(0)
    return Trajectory(
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-1.0 * m for m in mask],
        prompt_length=2,
        turn_spans=spans,
        step_rewards=step_rewards,
        reward=sum(step_rewards),
        group_id=group,
    )


def setup_for(overrides: list[str]):
    cfg = load_config(None, ["model.name=tiny", *ONE_STEP, *overrides], smoke=True)
    return build(cfg)


def episodes_of(setup, samples: list[Trajectory]) -> Episodes:
    return Episodes([[s] for s in samples], [setup.train_tasks[0]] * len(samples))


def test_mt_grpo_trains_on_turn_rewards_where_grpo_sees_equal_outcomes():
    # Same outcome (1.0) for both episodes of the group; the first turn's step reward differs.
    samples = [episode([3, 2], [0.5, 0.5], "g"), episode([2, 2], [0.0, 1.0], "g")]
    grpo = setup_for([])
    metrics = update_policy(grpo, make_optimizer(grpo), episodes_of(grpo, samples))
    assert metrics["skipped_update"] == 1.0 and metrics["nonzero_adv_fraction"] == 0.0
    assert metrics["turn_adv_nonzero"] == 1.0  # the signal GRPO leaves unused
    mt = setup_for(["algo.name=mt_grpo"])
    before = [p.detach().clone() for p in mt.policy.parameters()]
    batch = prepare_batch(mt, episodes_of(mt, samples))
    # +-1/sqrt(2) on the first turns' tokens, 0 on the last turns (equal outcomes)
    s = 0.5 / (0.5**0.5 + 1e-6)
    torch.testing.assert_close(batch.advantages[0, 2:5], torch.full((3,), s))
    torch.testing.assert_close(batch.advantages[1, 2:4], torch.full((2,), -s))
    assert not batch.advantages[:, 5:].any()
    metrics = update_policy(mt, make_optimizer(mt), episodes_of(mt, samples))
    assert metrics["skipped_update"] == 0.0 and metrics["optimizer_steps"] == 1.0
    moved = any(not torch.equal(a, b) for a, b in zip(before, mt.policy.parameters(), strict=True))
    assert moved


@pytest.mark.parametrize("critic", ["shared", "separate"])
def test_turn_ppo_reads_and_trains_its_critic_at_turn_starts(critic):
    setup = setup_for(["algo.name=turn_ppo", f"algo.critic={critic}", "rollout.group_size=2"])
    samples = [episode([3, 2], [0.5, 1.0], "g"), episode([2, 3, 1], [0.0, 0.2, 0.0], "h")]
    batch = prepare_batch(setup, episodes_of(setup, samples))
    # first tokens of the turns: row 0 at 2 and 6; row 1 at 2, 5 and 9
    want = torch.zeros(2, 10)
    want[0, [2, 6]] = 1
    want[1, [2, 5, 9]] = 1
    assert torch.equal(batch.value_mask, want)
    assert torch.equal(batch.returns != 0, (want > 0) & (batch.returns != 0))
    # every trained token of a turn carries its turn's advantage
    assert torch.equal(batch.advantages[0, 2:5], batch.advantages[0, 2].expand(3))
    assert torch.equal(batch.advantages[1, 5:8], batch.advantages[1, 5].expand(3))
    assert batch.value_mask.sum() == 5
    head = [p.detach().clone() for p in setup.value_head.parameters()]
    metrics = update_policy(setup, make_optimizer(setup), episodes_of(setup, samples))
    assert metrics["value_loss"] > 0 and metrics["skipped_update"] == 0.0
    assert any(
        not torch.equal(a, b) for a, b in zip(head, setup.value_head.parameters(), strict=True)
    )


def test_memory_mode_turn_credit_trains(tmp_path):
    # memagent: each chunk read is a conversation (a row) of the episode; Turn-PPO reads the
    # episode's turns over them
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=mem", "algo.name=turn_ppo"]
    assert (
        main(["train", "memagent", "model.name=tiny", "trainer.progress=false", *out, "--smoke"])
        == 0
    )
    rows = [r for r in read_metrics(tmp_path / "mem" / "metrics.jsonl") if "train/reward" in r]
    assert rows and all(r["train/samples"] > r["train/episodes"] for r in rows)

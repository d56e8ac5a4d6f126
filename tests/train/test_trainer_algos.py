"""Every advantage estimator runs through a real training step (tiny model, real env)."""

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.train.loop import train_step
from agentic_rl.train.setup import build, make_optimizer


@pytest.mark.parametrize(
    "overrides",
    [
        ["algo.name=grpo"],
        ["algo.name=dr_grpo", "algo.loss_agg=seq-mean-token-sum-norm"],
        ["algo.name=rloo", "algo.loss_agg=token-mean"],
        ["algo.name=reinforce_pp", "algo.kl_coef=0.01", "algo.kl_in_reward=true"],
        ["algo.name=reinforce_pp_baseline", "algo.kl_coef=0.01", "algo.kl_estimator=k2"],
        ["algo.name=ppo", "algo.kl_coef=0.01", "algo.kl_in_reward=true", "algo.lam=0.95"],
        ["algo.name=grpo", "algo.epochs=2", "algo.dual_clip=3.0", "rollout.chat_format=hermes"],
    ],
    ids=lambda o: "+".join(x.split("=")[1] for x in o),
)
def test_training_step_runs_and_moves_the_weights(overrides):
    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "algo.entropy_coef=0.01",
            "env.name=calculator",
            "env.topk=3",
            *overrides,
        ],
        smoke=True,
    )
    setup = build(cfg)
    before = [p.detach().clone() for p in setup.policy.parameters()]
    metrics = train_step(setup, make_optimizer(setup), step=1)
    for key in ("reward", "success", "entropy", "clip_frac", "kl", "grad_norm", "tokens_per_s"):
        assert key in metrics and metrics[key] == metrics[key], key  # present and not NaN
    assert metrics["skipped_update"] == 0.0
    moved = any(
        not torch.equal(a, b) for a, b in zip(before, setup.policy.parameters(), strict=True)
    )
    assert moved
    if cfg.algo.kl_coef > 0:
        assert setup.reference is not None
    if cfg.algo.name == "ppo":
        assert setup.value_head is not None and metrics["value_loss"] >= 0

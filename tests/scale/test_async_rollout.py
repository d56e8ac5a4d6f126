"""Asynchronous rollouts: versioned weights, partial rollouts across an update, staleness
bookkeeping, the decoupled-PPO update on stale samples, and a run through the trainer."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.math.calculator import CalculatorEnv, make_calculator_tasks
from agentic_rl.formats.registry import make_chat_format
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import Episodes, collate
from agentic_rl.learner.update import forward_no_grad, update
from agentic_rl.model.load import token_logprobs
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.rollout.loop import run_episodes
from agentic_rl.scale.async_rollout import VersionedGenerator, correct_stale, staleness_metrics
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Trajectory


class PublishingEnv(CalculatorEnv):
    """Publishes new weights to the generator from inside its first step: the update lands
    between the episode's first and second turn."""

    def __init__(self, generator: VersionedGenerator, state: dict) -> None:
        super().__init__()
        self.generator, self.state = generator, state

    def step(self, action):
        if not self.history:
            self.generator.publish(self.state, version=1)
        return super().step(action)


def _logprobs(model, ids: list[int]) -> list[float]:
    input_ids = torch.tensor([ids])
    lp, _, _ = token_logprobs(model, input_ids, torch.ones_like(input_ids))
    return lp[0].tolist()


def test_partial_rollout_continues_under_new_weights_with_versions(tiny, tokenizer):
    new = copy.deepcopy(tiny)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))
    generator = VersionedGenerator(copy.deepcopy(tiny), tokenizer, max_batch_size=4, version=0)
    cfg = load_config("calculator_grpo", ["model.name=tiny", "rollout.max_tokens_per_turn=8"])
    cfg.rollout.max_turns = 2
    env = PublishingEnv(generator, {k: v.clone() for k, v in new.state_dict().items()})
    fmt = make_chat_format("tags", env.tools, tokenizer)
    act = policy_actor(generator, fmt, cfg.rollout, seed=1)
    task = make_calculator_tasks("train", 1)[0]
    (traj,) = run_episodes([env], [task], ["g"], act, fmt, tokenizer, cfg.rollout, seed=1)

    assert len(traj.turn_spans) == 2 and generator.swaps == 1 and generator.version == 1
    (a0, a1), (b0, b1) = traj.turn_spans
    assert set(traj.token_versions[a0:a1]) == {0} and set(traj.token_versions[b0:b1]) == {1}
    assert all(v == -1 for v, m in zip(traj.token_versions, traj.loss_mask, strict=True) if m == 0)
    assert traj.policy_version == 0  # the oldest version in the episode bounds its staleness
    # Behaviour logprobs are those of the weights each token was sampled with: the second turn
    # was prefilled again under the new weights (no stale KV cache reused).
    old_lp, new_lp = _logprobs(tiny, traj.token_ids), _logprobs(new, traj.token_ids)
    for t in range(a0, a1):
        assert math.isclose(traj.logprobs[t], old_lp[t], abs_tol=1e-4)
    for t in range(b0, b1):
        assert math.isclose(traj.logprobs[t], new_lp[t], abs_tol=1e-4)
    assert not math.isclose(traj.logprobs[b0], old_lp[b0], abs_tol=1e-3)


def _sample(versions: list[int]) -> Trajectory:
    n = len(versions)
    mask = [int(v >= 0) for v in versions]
    return Trajectory(list(range(n)), mask, [0.0] * n, 0, token_versions=versions)


def test_staleness_metrics_by_hand():
    episodes = Episodes([[_sample([-1, -1, 2, 2, 3])], [_sample([-1, 1, 1])]], [None, None])
    m = staleness_metrics(episodes, learner_version=3)
    # ages of policy tokens: [1, 1, 0] and [2, 2]
    assert m["staleness_mean"] == (1 + 1 + 0 + 2 + 2) / 5
    assert m["staleness_max"] == 2.0
    assert m["stale_token_fraction"] == 4 / 5
    assert m["partial_rollouts"] == 1 / 2  # only the first spans two versions


def _stale_batch(model, tokenizer, log_w: float):
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(4):
        ids = torch.randint(5, len(tokenizer), (10,), generator=g).tolist()
        mask = [0] * 4 + [1] * 6
        trajs.append(Trajectory(ids, mask, [0.0] * 10, 4, reward=float(i % 2), group_id="g"))
    batch = collate(trajs, 0)
    current, _ = forward_no_grad(model, batch, 64, 8)
    batch.old_logprobs = current
    batch.behav_logprobs = (current - log_w) * batch.loss_mask  # pi_prox / pi_behav = e^log_w
    return batch


def test_stale_tokens_are_weighted_by_the_truncated_importance_ratio(tiny, tokenizer):
    """One on-policy epoch without clipping: the gradient is linear in the token weights, so
    weights w = 2 (behaviour twice less likely than the proximal policy) double it, w = 1
    gives the plain gradient, and w = 10 is truncated at algo.stale_is_cap = 5."""
    cfg = load_config(None, ["model.name=tiny", "rollout.max_staleness=1", "optim.max_grad_norm=0"])
    grads = {}
    for name, log_w in (("fresh", None), ("w1", 0.0), ("w2", math.log(2)), ("w10", math.log(10))):
        model = copy.deepcopy(tiny)
        batch = _stale_batch(model, tokenizer, log_w or 0.0)
        if log_w is None:
            batch.behav_logprobs = None
        compute_advantages(batch, cfg.algo)
        update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    fresh = grads["fresh"]
    assert fresh.abs().sum() > 0
    # The learner's own forward pass may differ from the one above in the last float bits.
    tol = {"rtol": 1e-4, "atol": 1e-4 * float(fresh.abs().max())}
    torch.testing.assert_close(grads["w1"], fresh, **tol)
    torch.testing.assert_close(grads["w2"], 2 * fresh, **tol)
    torch.testing.assert_close(grads["w10"], 5 * fresh, **tol)


def test_correct_stale_takes_the_ratio_against_the_proximal_policy(tiny, tokenizer):
    """correct_stale marks the batch; the learner recomputes pi_old = pi_prox once before its
    first step (two epochs) and keeps the generator's logprobs as pi_behav."""
    cfg = load_config(None, ["model.name=tiny", "rollout.max_staleness=1", "algo.epochs=2"])
    batch = _stale_batch(tiny, tokenizer, 0.0)
    behaviour = batch.old_logprobs - 0.3 * batch.loss_mask  # as sampled by older weights
    batch.old_logprobs, batch.behav_logprobs = behaviour.clone(), None
    correct_stale(SimpleNamespace(cfg=cfg, policy=tiny), batch)
    assert batch.stale and torch.equal(batch.behav_logprobs, behaviour)
    compute_advantages(batch, cfg.algo)
    model = copy.deepcopy(tiny)
    metrics = update(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, cfg)
    proximal, _ = forward_no_grad(tiny, batch, 64, 8)
    torch.testing.assert_close(batch.old_logprobs, proximal)
    assert torch.equal(batch.behav_logprobs, behaviour)
    # every token: pi_prox / pi_behav = e^0.3 = 1.35, under algo.stale_is_cap
    assert metrics["rollout_correction_weight"] == pytest.approx(math.exp(0.3), rel=1e-4)


SMOKE = [
    "model.name=tiny",
    "warm_start.num_tasks=0",
    "trainer.eval_before=false",
    "trainer.progress=false",
    "trainer.tensorboard=false",
    "trainer.steps=2",
    "env.num_eval_tasks=1",
    "rollout.tasks_per_step=1",
    "rollout.max_tokens_per_turn=4",
    "algo.entropy_coef=0.01",  # every step updates the weights
    "env.options={step_latency_s: 0.2}",  # a slow tool: episodes span the learner's updates
]


def _train(tmp_path, name: str, extra: list[str]) -> list[dict]:
    cfg = load_config("calculator_grpo", [*SMOKE, f"trainer.out_dir={tmp_path / name}", *extra])
    train_recipe(cfg)
    lines = (tmp_path / name / "calculator_grpo" / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if "train/reward" in m]


@pytest.mark.slow
def test_async_run_trains_on_samples_at_most_k_versions_old(tmp_path):
    steps = _train(tmp_path, "async", ["rollout.max_staleness=1"])
    assert [m["step"] for m in steps] == [1, 2]
    assert steps[0]["train/staleness_max"] == 0  # the first batch is generated by version 0
    # Batch 2 was started by the worker while update 1 ran: at least its first turn is one
    # version old (a synchronous run has every token fresh), never more (max_staleness=1).
    assert steps[1]["train/staleness_max"] == 1 and steps[1]["train/stale_token_fraction"] > 0
    assert all(m["train/loss"] != 0 for m in steps)


def test_async_settings_are_validated():
    bad = {
        "algo.stale_is_cap is set but does nothing": ["algo.stale_is_cap=3"],
        "rollout.max_staleness must be >= 0": ["rollout.max_staleness=-1"],
        "algo.stale_is_cap must be >= 1": ["rollout.max_staleness=1", "algo.stale_is_cap=0.5"],
        "not the token-level ppo loss": [
            "rollout.max_staleness=1",
            "algo.policy_loss=gspo",
            "algo.loss_agg=seq-mean-token-mean",
            "algo.clip_high=0.2",
        ],
        "does not combine with ray.generator_actor": [
            "rollout.max_staleness=1",
            "ray.enabled=true",
            "ray.generator_actor=true",
        ],
    }
    for message, overrides in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, overrides)

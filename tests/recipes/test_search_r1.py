"""The `search_r1` recipes (PPO and GRPO): Search-R1's protocol and reward, retrieved tokens
masked out of the loss.

Mechanism checked: in the batch the learner trains on, every retrieved (<information>) token has
loss mask 0 and the update's loss has exactly zero gradient with respect to its logprob, while
the generated tokens have non-zero gradients; with the `rollout.train_on_observations=true`
ablation the same tokens are in the mask and get gradients.
"""

from __future__ import annotations

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.learner import update as learner
from agentic_rl.learner.batch import Episodes
from agentic_rl.logging import read_metrics
from agentic_rl.train.batch import prepare_batch
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build, make_optimizer
from agentic_rl.train.stages import train_recipe

SMOKE = ["model.name=tiny", "trainer.progress=false"]


def expert_or_wrong(ep, index, turn):
    """Episode 0 of a group plays the scripted expert (valid format, right answer: 1.0); the
    others answer at once with a wrong answer in a valid format (0.2)."""
    if index == 0:
        return ep.env.expert_turn()
    return "<think>I guess.</think><answer>Nowhere</answer>"


@pytest.mark.parametrize("recipe, algo", [("search_r1", "ppo"), ("search_r1_grpo", "grpo")])
def test_search_r1_smoke(tmp_path, scripted, recipe, algo):
    scripted(expert_or_wrong)
    cfg = load_config(recipe, [*SMOKE, f"trainer.out_dir={tmp_path}"], smoke=True)
    assert cfg.algo.name == algo and cfg.env.options["reward"] == "search_r1"
    assert not cfg.rollout.train_on_observations
    summary = train_recipe(cfg)
    assert summary["steps"] == 2
    rows = read_metrics(tmp_path / recipe / "metrics.jsonl")
    train = [r for r in rows if "train/reward" in r]
    assert [r["train/reward"] for r in train] == [pytest.approx(0.6)] * 2  # (1.0 + 0.2) / 2
    assert all(r["train/success"] == 0.5 for r in train)
    if algo == "ppo":
        assert all(r["train/value_loss"] > 0 for r in train)  # the value head is trained
    before = next(r for r in rows if "eval_before/success" in r)
    assert before["eval_before/success"] == 1.0  # the first greedy episode of a task: the expert


def observation_positions(t) -> list[int]:
    """Token positions after the prompt outside every model turn: what the env inserted."""
    inside = {p for start, end in t.turn_spans for p in range(start, end)}
    return [p for p in range(t.prompt_length, len(t.token_ids)) if p not in inside]


def expert_then_right_or_wrong(ep, index, turn):
    """The expert's searches; group "a" then answers right (1.0), group "b" wrong (0.2)."""
    text = ep.env.expert_turn()
    if ep.group_id == "b" and "<answer>" in text:
        return "<think>No idea.</think><answer>Nowhere</answer>"
    return text


def logprob_gradients(monkeypatch, scripted, unmasked: bool):
    """One real PPO update of the search_r1 recipe on two searching episodes; returns the
    trajectories, the batch and d loss / d logprob of every token [N, T]."""
    flag = "true" if unmasked else "false"
    overrides = [*SMOKE, f"rollout.train_on_observations={flag}", "optim.micro_batch_size=8"]
    cfg = load_config("search_r1", overrides, smoke=True)
    setup = build(cfg)
    tasks = setup.train_tasks[:2]
    samples = play(setup, tasks, ["a", "b"], scripted(expert_then_right_or_wrong), 0)
    assert [s[0].reward for s in samples] == [1.0, pytest.approx(0.2)]
    batch = prepare_batch(setup, Episodes(samples, tasks))
    captured = []
    real = learner.token_logprobs

    def spy(*args, **kwargs):
        logprobs, entropy, hidden = real(*args, **kwargs)
        if logprobs.requires_grad:  # the update's forward, not a no-grad pass
            logprobs.retain_grad()
            captured.append(logprobs)
        return logprobs, entropy, hidden

    monkeypatch.setattr(learner, "token_logprobs", spy)
    learner.update(setup.policy, make_optimizer(setup), batch, cfg, setup.value_head)
    (logprobs,) = captured  # both rows in one micro-batch
    rows = learner._rows_with_gradient(batch, cfg.algo, setup.value_head)
    grads = torch.zeros_like(batch.loss_mask)
    grads[rows] = logprobs.grad
    return [s[0] for s in samples], batch, grads, setup.tokenizer


def test_retrieved_tokens_are_masked_and_get_no_gradient(monkeypatch, scripted):
    trajectories, batch, grads, tokenizer = logprob_gradients(monkeypatch, scripted, False)
    for row, t in enumerate(trajectories):
        inserted = observation_positions(t)
        generated = [p for start, end in t.turn_spans for p in range(start, end)]
        assert len(inserted) > 100  # two searches' documents
        first = tokenizer.decode(t.token_ids[inserted[0] : inserted[0] + 12])
        assert first.startswith("\n\n<information>Doc 1(Title:")
        assert batch.loss_mask[row, inserted].sum() == 0
        assert torch.all(grads[row, inserted] == 0)
        assert (grads[row, generated] != 0).float().mean() > 0.9


def test_without_the_mask_retrieved_tokens_are_trained(monkeypatch, scripted):
    trajectories, batch, grads, _ = logprob_gradients(monkeypatch, scripted, True)
    for row, t in enumerate(trajectories):
        inserted = observation_positions(t)
        assert torch.all(batch.loss_mask[row, inserted] == 1)
        assert (grads[row, inserted] != 0).float().mean() > 0.9


def test_transcript_rewards_need_the_tag_chat_format():
    with pytest.raises(ConfigError, match="needs rollout.chat_format=tags"):
        load_config("search_r1", ["rollout.chat_format=hermes"])

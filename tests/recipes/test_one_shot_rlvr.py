"""The `one_shot_rlvr` recipe: RL on a single training example with an entropy bonus.

Mechanisms checked: under --smoke every rollout of every RL step of the one-shot stage is the
same single task (and its run holds one training task); the entropy bonus changes the loss by
exactly -entropy_coef x the entropy aggregated like the policy loss, computed here by hand from
the model's logits, and changes the update (with zero advantages it is the only gradient).
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.envs.calculator import make_calculator_tasks
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import _micro_batch_loss, update
from agentic_rl.model.load import tiny_model
from agentic_rl.train import collect
from agentic_rl.train.collect import rollout
from agentic_rl.train.stages import train_recipe
from agentic_rl.types import Trajectory

FAST = ["model.name=tiny", "trainer.progress=false", "trainer.tensorboard=false"]


def rl_stage(*overrides: str) -> Config:
    cfg = load_config("one_shot_rlvr", [*FAST, *overrides])
    return build_dataclass(Config, dict(cfg.stages[1]))


def test_smoke_trains_every_step_on_the_one_example(tmp_path, monkeypatch):
    calls = []
    real_rollout = rollout

    def recording(setup, tasks, group_size, seed, step, stats=None):
        stage = setup.cfg.trainer.run_name.split("/")[-1]
        calls.append((stage, len(setup.train_tasks), [t.task_id for t in tasks], group_size))
        return real_rollout(setup, tasks, group_size, seed, step, stats)

    monkeypatch.setattr(collect, "rollout", recording)
    overrides = [*FAST, f"trainer.out_dir={tmp_path}", "env.num_eval_tasks=2"]
    summary = train_recipe(load_config("one_shot_rlvr", overrides, smoke=True))
    assert list(summary["stages"]) == ["format_sft", "one_shot_rl"]
    one_shot = [c for c in calls if c[0] == "one_shot_rl"]
    assert len(one_shot) == summary["stages"]["one_shot_rl"]["steps"] == 2
    example = make_calculator_tasks("train", 1, seed=0)[0].task_id
    for _, num_train_tasks, task_ids, group_size in one_shot:
        assert num_train_tasks == 1
        assert task_ids == [example]  # the whole batch: G samples of the one example
        assert group_size == 2
    config = json.loads((tmp_path / "one_shot_rlvr" / "one_shot_rl" / "config.json").read_text())
    assert config["algo"]["entropy_coef"] > 0


def hand_batch(tokenizer):
    texts = ["<calc>12 * 34</calc>", "<answer>408</answer> done"]
    rows = []
    for text in texts:
        prompt = tokenizer("Question: what is 12 * 34?")["input_ids"]
        reply = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = prompt + reply
        mask = [0] * len(prompt) + [1] * len(reply)
        rows.append(Trajectory(ids, mask, [0.0] * len(ids), prompt_length=len(prompt)))
    batch = collate(rows, tokenizer.pad_token_id)
    batch.advantages = torch.tensor([[1.0], [-1.0]]) * batch.loss_mask
    return batch


def hand_entropy(model, batch) -> torch.Tensor:
    """seq-mean-token-mean of H_t = -sum_v p log p over the loss tokens (GRPO's aggregation)."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logp = torch.log_softmax(logits.double(), dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)  # [N, T]: H of the distribution at position t
    per_token = torch.zeros_like(batch.loss_mask, dtype=torch.float64)
    per_token[:, 1:] = entropy[:, :-1]  # position t-1 predicts token t
    mask = batch.loss_mask.double()
    return ((per_token * mask).sum(1) / mask.sum(1)).mean()


def test_entropy_bonus_changes_the_loss_by_exactly_minus_coef_times_entropy(tokenizer):
    cfg = rl_stage()
    coef = cfg.algo.entropy_coef
    assert coef > 0 and cfg.algo.loss_agg == "seq-mean-token-mean"
    off = copy.deepcopy(cfg)
    off.algo.entropy_coef = 0.0
    model = tiny_model(len(tokenizer), seed=0)
    batch = hand_batch(tokenizer)
    counts = {"num_sequences": len(batch), "num_tokens": float(batch.loss_mask.sum())}
    counts["max_tokens"] = cfg.rollout.max_total_tokens
    with torch.no_grad():
        loss_on = _micro_batch_loss(model, batch, cfg, counts, None)["loss"]
        loss_off = _micro_batch_loss(model, batch, off, counts, None)["loss"]
    entropy = hand_entropy(model, batch)
    assert entropy > 1.0  # a random model over a 49k vocabulary is far from deterministic
    assert float(loss_on - loss_off) == pytest.approx(-coef * float(entropy), rel=1e-4)


def test_entropy_bonus_changes_the_update(tokenizer):
    cfg = rl_stage("optim.lr=1e-3", "optim.micro_batch_size=8")
    off = copy.deepcopy(cfg)
    off.algo.entropy_coef = 0.0
    after = {}
    for name, run_cfg, advantages in (("on", cfg, 1.0), ("off", off, 1.0), ("only", cfg, 0.0)):
        model = tiny_model(len(tokenizer), seed=0)
        batch = hand_batch(tokenizer)
        batch.advantages = batch.advantages * advantages
        optimizer = torch.optim.AdamW(model.parameters(), lr=run_cfg.optim.lr)
        update(model, optimizer, batch, run_cfg)
        after[name] = (model, hand_entropy(model, batch))
    start = hand_entropy(tiny_model(len(tokenizer), seed=0), hand_batch(tokenizer))
    on, off = (after[name][0].model.embed_tokens.weight for name in ("on", "off"))
    assert not torch.allclose(on, off)
    # with zero advantages the entropy bonus is the whole gradient: it raises the entropy
    assert after["only"][1] > start

"""Choosing the generator from config and keeping it in step with the learner."""

from __future__ import annotations

import copy

import torch

from agentic_rl.backends.base import Generator, make_generator, shares_weights, sync_weights
from agentic_rl.backends.hf import HFGenerator
from agentic_rl.config.load import load_config
from agentic_rl.model.load import load_policy
from agentic_rl.types import SamplingParams


def test_hf_backend_shares_the_policy_and_only_drops_stale_kv(tmp_path):
    cfg = load_config(None, ["model.name=tiny"])
    policy, tok = load_policy(cfg.model)
    gen = make_generator(cfg, policy, tok)
    assert isinstance(gen, HFGenerator) and isinstance(gen, Generator)
    assert shares_weights(gen, policy)
    gen.generate([tok("Hi there")["input_ids"]], SamplingParams(max_new_tokens=3, seed=0))
    assert gen._kv_store  # the finished turn's KV is kept for a next turn
    sync_weights(gen, policy)
    assert not gen._kv_store


def test_trainer_sends_new_weights_to_a_generator_with_its_own_copy(tmp_path):
    """After each update the trainer hands the learner's weights to the generator; without
    that sync a generator holding its own copy (vLLM's case) would keep sampling from the
    initial policy."""
    from agentic_rl.train.loop import train_step
    from agentic_rl.train.setup import build, make_optimizer

    cfg = load_config(
        None,
        [
            "model.name=tiny",
            "algo.entropy_coef=0.01",  # random-token episodes score alike: keep the update
            "optim.lr=0.01",
            "rollout.max_turns=1",
            "rollout.max_tokens_per_turn=4",
            f"trainer.out_dir={tmp_path}",
        ],
        smoke=True,
    )
    setup = build(cfg)
    own_copy = copy.deepcopy(setup.policy)
    setup.generator = HFGenerator(own_copy, setup.tokenizer)
    assert not shares_weights(setup.generator, setup.policy)
    before = {k: v.clone() for k, v in own_copy.state_dict().items()}
    metrics = train_step(setup, make_optimizer(setup), step=1)
    assert metrics["skipped_update"] == 0.0
    changed = [k for k, v in setup.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # the learner moved
    for key, value in setup.policy.state_dict().items():
        assert torch.equal(own_copy.state_dict()[key], value), key  # and the generator followed


def test_lora_policy_syncs_into_a_plain_copy_of_its_model():
    """A generator without adapter support (an HF copy, e.g. on a Ray actor) gets the full
    state of the adapted model, adapter tensors included."""
    import pytest

    pytest.importorskip("peft")
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.lora import unwrap

    policy, tok = load_policy(ModelConfig(name="tiny", lora_rank=4, lora_alpha=8.0))
    gen = HFGenerator(copy.deepcopy(unwrap(policy)), tok)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    sync_weights(gen, policy)
    for key, value in unwrap(policy).state_dict().items():
        assert torch.equal(gen.model.state_dict()[key], value), key

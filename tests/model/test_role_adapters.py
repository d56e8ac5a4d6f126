"""A policy per role (model.role_policies=adapters): a LoRA adapter per role on one frozen base.

Each role's update touches only its own adapter (and never the base), a frozen role's adapter
never moves, the learner scores each row through its role's adapter, the generator decodes each
role's prompts with its adapter, and checkpoints restore every role's adapter."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from role_episodes import role_episodes  # noqa: E402

from agentic_rl.backends.hf import HFGenerator  # noqa: E402
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint  # noqa: E402
from agentic_rl.checkpoint.layout import ADAPTER_DIR  # noqa: E402
from agentic_rl.config.load import load_config  # noqa: E402
from agentic_rl.config.rollout import ModelConfig  # noqa: E402
from agentic_rl.learner.advantages import compute_advantages  # noqa: E402
from agentic_rl.learner.batch import collate  # noqa: E402
from agentic_rl.learner.update import forward_no_grad, update  # noqa: E402
from agentic_rl.model.load import load_policy, token_logprobs  # noqa: E402
from agentic_rl.model.lora import (  # noqa: E402
    AdapterReference,
    adapter_disabled,
    adapter_names,
    adapter_parameters,
    add_role_adapters,
    role_adapters,
    unwrap,
    use_adapter,
)
from agentic_rl.rollout.roles import role_actor  # noqa: E402
from agentic_rl.types import Completion, SamplingParams, Trajectory  # noqa: E402

LORA = ModelConfig(name="tiny", lora_rank=4, lora_alpha=8.0)
ROLES = ("solver", "verifier")


def role_policy(trained=(), seed=0):
    policy, tokenizer = load_policy(LORA, seed=seed)
    add_role_adapters(policy, ROLES, LORA, trained)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # B = 0 makes every adapter the base: give each its own weights
        for role in ROLES:
            for param in adapter_parameters(policy, role):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return policy, tokenizer


def snapshot(policy):
    return {n: p.detach().clone() for n, p in policy.named_parameters()}


def changed(before, policy, mark):
    return [n for n, p in policy.named_parameters() if mark in n and not torch.equal(p, before[n])]


def sample(tokenizer, text, role, group, reward=1.0):
    prompt = tokenizer(f"{role}: question")["input_ids"]
    reply = tokenizer(text)["input_ids"]
    return Trajectory(
        token_ids=prompt + reply,
        loss_mask=[0] * len(prompt) + [1] * len(reply),
        logprobs=[0.0] * (len(prompt) + len(reply)),
        prompt_length=len(prompt),
        turn_spans=[(len(prompt), len(prompt) + len(reply))],
        step_rewards=[0.0],
        reward=reward,
        group_id=group,
        role=role,
    )


def test_role_adapters_replace_the_default_one_and_train_as_asked():
    policy, _ = role_policy(trained=("solver",))
    assert adapter_names(policy) == ROLES and role_adapters(policy) == ROLES
    assert role_adapters(unwrap(policy)) == ROLES  # the generator's model sees them too
    assert all(p.requires_grad for p in adapter_parameters(policy, "solver"))
    assert not any(p.requires_grad for p in adapter_parameters(policy, "verifier"))
    with use_adapter(policy, "verifier"):  # PEFT's set_adapter would flip the flags
        assert not any(p.requires_grad for p in adapter_parameters(policy, "verifier"))
    assert all(p.requires_grad for p in adapter_parameters(policy, "solver"))
    with pytest.raises(ValueError, match="no adapter 'critic'"), use_adapter(policy, "critic"):
        pass


def test_each_role_computes_with_its_own_adapter_and_the_reference_with_none():
    policy, tokenizer = role_policy()
    ids = torch.tensor([tokenizer("the answer is 42")["input_ids"]])
    attn = torch.ones_like(ids)
    outs = {}
    for role in ROLES:
        with use_adapter(policy, role):
            outs[role], _, _ = token_logprobs(policy, ids, attn)
    with adapter_disabled(policy):
        base, _, _ = token_logprobs(policy, ids, attn)
    assert not torch.allclose(outs["solver"], outs["verifier"])
    assert not torch.allclose(outs["solver"], base)
    # the learner's batched pass picks each row's adapter: rows of both roles, mixed order
    rows = [sample(tokenizer, "the answer is 42", r, "g") for r in ("verifier", "solver")]
    batch = collate(rows, tokenizer.pad_token_id)
    got, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
    for i, role in enumerate(("verifier", "solver")):
        with use_adapter(policy, role):
            want, _, _ = token_logprobs(
                policy, batch.input_ids[i : i + 1], batch.attention_mask[i : i + 1]
            )
        torch.testing.assert_close(got[i], (want * batch.loss_mask[i : i + 1])[0])
    with adapter_disabled(policy):  # the LoRA reference: every role's adapter off
        ref, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
        plain, _, _ = token_logprobs(policy, batch.input_ids, batch.attention_mask)
    torch.testing.assert_close(ref, plain * batch.loss_mask)


def test_the_adapter_reference_scores_each_row_with_that_roles_frozen_adapter():
    """The KL reference after a warm start (train/setup.py: an AdapterReference, the base with
    a frozen copy of every role's adapter) gives each row its role's warm-started policy, not
    the base, after both roles' adapters moved on."""
    policy, tokenizer = role_policy()
    reference = AdapterReference(policy)
    rows = [sample(tokenizer, "the answer is 42", r, "g") for r in ("verifier", "solver")]
    batch = collate(rows, tokenizer.pad_token_id)
    want, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():  # RL moves both roles' adapters
        for role in ROLES:
            for param in adapter_parameters(policy, role):
                param.add_(torch.randn(param.shape, generator=gen) * 0.3)
    moved, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
    with reference.computing_with(policy) as ref_policy:
        got, _ = forward_no_grad(ref_policy, batch, chunk=64, micro=8)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    for row in range(2):  # each row's role moved: its reference differs from its policy now
        assert (got[row] - moved[row]).abs().max() > 1e-3
    with adapter_disabled(policy):
        base, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
    assert (got - base).abs().max() > 1e-3


def grpo_update(policy, tokenizer, rewards, overrides=()):
    """One GRPO update on two groups' samples of both roles with the given rewards."""
    cfg = load_config(
        None, ["algo.name=grpo", "optim.lr=1e-2", "optim.weight_decay=0.1", *overrides]
    )
    rows = [
        sample(tokenizer, text, role, "g", reward)
        for (role, text), reward in zip(
            [("solver", "it is 3"), ("solver", "it is 4"), ("verifier", "yes"), ("verifier", "no")],
            rewards,
            strict=True,
        )
    ]
    batch = collate(rows, tokenizer.pad_token_id)
    batch.episode_index = torch.arange(len(rows))
    batch.group_ids = torch.tensor([0, 0, 1, 1])  # each role's pair is one group here
    compute_advantages(batch, cfg.algo)
    optimizer = torch.optim.AdamW(
        [p for p in policy.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1
    )
    update(policy, optimizer, batch, cfg)


def test_an_update_where_only_one_role_has_advantage_moves_only_its_adapter():
    policy, tokenizer = role_policy()
    before = snapshot(policy)
    grpo_update(policy, tokenizer, [1.0, 0.0, 1.0, 1.0])  # the verifier's group is constant
    assert changed(before, policy, ".solver.")
    assert not changed(before, policy, ".verifier.")
    assert not changed(before, policy, "base_layer") and not changed(before, policy, "embed")


def test_a_frozen_role_never_moves_even_with_advantage():
    policy, tokenizer = role_policy(trained=("verifier",))
    before = snapshot(policy)
    grpo_update(policy, tokenizer, [1.0, 0.0, 1.0, 0.0])  # both roles' groups carry advantage
    assert changed(before, policy, ".verifier.")
    assert not changed(before, policy, ".solver.")
    assert not [
        n
        for n, p in policy.named_parameters()
        if "lora_" not in n and not torch.equal(p, before[n])
    ]


def test_checkpoints_restore_every_roles_adapter(tmp_path):
    policy, _ = role_policy(seed=0)
    save_checkpoint(tmp_path, 3, policy, None, None, {"note": 1})
    step_dir = next((tmp_path / "checkpoints").iterdir())
    for role in ROLES:
        assert (step_dir / ADAPTER_DIR / role / "adapter_model.safetensors").is_file()
    fresh, _ = role_policy(seed=5)  # other adapter weights, the same base (tiny seed 5 differs)
    fresh_base, _ = load_policy(LORA, seed=0)
    add_role_adapters(fresh_base, ROLES, LORA)
    state = load_checkpoint(step_dir, fresh_base)
    assert state["step"] == 3
    for role in ROLES:
        for a, b in zip(
            adapter_parameters(policy, role), adapter_parameters(fresh_base, role), strict=True
        ):
            assert torch.equal(a, b)
    assert fresh is not None


def test_role_actor_decodes_each_roles_prompts_with_its_adapter():
    policy, tokenizer = role_policy()
    generator = HFGenerator(unwrap(policy), tokenizer, max_batch_size=8)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)

    def act(episodes, budgets, turn):
        return generator.generate([ep.token_ids for ep in episodes], params)

    episodes = role_episodes(tokenizer, ("solver", "verifier", "solver"))
    got = role_actor(act, generator)(episodes, [6, 6, 6], 0)
    for role in ROLES:
        with use_adapter(policy, role):
            generator.update_weights(None)
            mine = [ep for ep in episodes if ep.role == role]
            want = act(mine, [6] * len(mine), 0)
        got_role = [c for c, ep in zip(got, episodes, strict=True) if ep.role == role]
        assert [c.token_ids for c in got_role] == [c.token_ids for c in want]
        assert all(isinstance(c, Completion) for c in got_role)
    # the two roles' policies differ: the same prompt and seed give other logprobs
    assert got[0].logprobs[0] != got[1].logprobs[0]
    assert role_actor(act, HFGenerator(load_policy(LORA)[0].get_base_model(), tokenizer)) is act


def test_a_bf16_generator_decodes_each_role_with_its_adapter():
    """rollout.mixed_precision=bf16: the generator decodes on a bfloat16 copy of the model that
    holds every role's adapter; at each role switch the copy computes with the role's adapter,
    so each role's sampled tokens carry its own policy's logprobs (float32 scoring of the same
    tokens, to bfloat16 rounding), not those of the adapter active when the copy was made."""
    policy, tokenizer = role_policy()
    model = unwrap(policy)
    generator = HFGenerator(model, tokenizer, max_batch_size=8, mixed_precision="bf16")
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=3)

    def act(episodes, budgets, turn):
        return generator.generate([ep.token_ids for ep in episodes], params)

    episodes = role_episodes(tokenizer, ("solver", "verifier", "solver", "verifier"))
    prompt = episodes[0].token_ids
    replies = role_actor(act, generator)(episodes, [6] * 4, 0)
    cfg = load_config("solver_verifier", ["model.name=tiny", "rollout.mixed_precision=bf16"])
    assert cfg.model.role_policies == "adapters"  # the setting loads (it was refused before)
    for reply, ep in zip(replies, episodes, strict=True):
        ids = torch.tensor([prompt + list(reply.token_ids)])
        scored = {}
        for role in ROLES:
            with use_adapter(policy, role):
                lp, _, _ = token_logprobs(model, ids, torch.ones_like(ids))
            scored[role] = lp[0, len(prompt) :]
        got = torch.tensor(reply.logprobs)
        other = "verifier" if ep.role == "solver" else "solver"
        own_error = (got - scored[ep.role]).abs().mean().item()  # bfloat16 rounding
        other_error = (got - scored[other]).abs().mean().item()  # another policy
        assert own_error < 0.1 and other_error > 3 * own_error, (ep.role, own_error, other_error)

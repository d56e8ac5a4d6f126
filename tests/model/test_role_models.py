"""A policy per role (model.role_policies=models): a full copy of the model per role.

Each role starts from the same weights in storage of its own, the learner scores every row and
updates every role through that role's model only, a frozen role's model never moves, the
generator decodes each role's prompts with its own model, and checkpoints (and a resumed run)
restore every role's model bit for bit."""

from __future__ import annotations

import pytest
import torch
from role_episodes import role_episodes
from safetensors.torch import load_file

from agentic_rl.backends.base import make_generator, shares_weights, sync_weights
from agentic_rl.backends.hf import HFGenerator
from agentic_rl.backends.roles import RoleGenerators
from agentic_rl.checkpoint.io import load_checkpoint, save_checkpoint
from agentic_rl.checkpoint.layout import MODEL_FILE, latest_checkpoint
from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import adamw, forward_no_grad, update
from agentic_rl.model.load import frozen_copy, load_policy, token_logprobs
from agentic_rl.model.roles import RoleModels, as_role, role_policies
from agentic_rl.rollout.roles import role_actor
from agentic_rl.types import SamplingParams, Trajectory

TINY = ModelConfig(name="tiny")
ROLES = ("solver", "verifier")


def role_models(trained=(), seed=0):
    """A model per role; the verifier's weights are then moved off the solver's, so the two
    roles compute different things (copies start equal)."""
    base, tokenizer = load_policy(TINY, seed=seed)
    policy = RoleModels.copies(base, ROLES, trained)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in policy.models["verifier"].parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    return policy, tokenizer


def snapshot(module):
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def moved(before, module):
    return {n for n, p in module.named_parameters() if not torch.equal(p, before[n])}


def sample(tokenizer, text, role, reward=1.0):
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
        group_id="g",
        role=role,
    )


def test_each_role_gets_its_own_copy_of_the_same_initial_weights():
    base, _ = load_policy(TINY)
    policy = RoleModels.copies(base, ROLES, trained=("solver",))
    assert role_policies(policy) == ROLES and role_policies(base) == ()
    solver, verifier = policy.models["solver"], policy.models["verifier"]
    assert solver is base  # loaded once: the first role takes it, the others copy it
    for a, b in zip(solver.parameters(), verifier.parameters(), strict=True):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()  # no storage shared
    assert solver.lm_head.weight is solver.model.embed_tokens.weight  # still tied in a copy
    assert all(p.requires_grad for p in solver.parameters())
    assert not any(p.requires_grad for p in verifier.parameters())  # frozen: in no optimizer
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    assert trainable == sum(p.numel() for p in base.parameters())


def test_as_role_hands_out_the_role_model_and_restores_the_active_role():
    policy, _ = role_models()
    with as_role(policy, "verifier") as model:
        assert model is policy.models["verifier"] and policy.active == "verifier"
        with as_role(policy, "solver") as inner:
            assert inner is policy.models["solver"] and policy.active == "solver"
        assert policy.active == "verifier"
    assert policy.active is None
    with pytest.raises(ValueError, match="no model for role 'critic'"), as_role(policy, "critic"):
        pass
    with pytest.raises(ValueError, match="no model for role None"), as_role(policy, None):
        pass
    assert policy.active is None
    with pytest.raises(TypeError, match="as_role"):
        policy(torch.zeros(1, 2, dtype=torch.long))
    base, _ = load_policy(TINY)
    with as_role(base, None) as model:  # a model every role shares: itself
        assert model is base


def test_each_row_is_scored_by_its_roles_model_and_the_reference_by_its_roles_copy():
    policy, tokenizer = role_models()
    order = ("verifier", "solver", "verifier")
    batch = collate([sample(tokenizer, "it is 42", r) for r in order], tokenizer.pad_token_id)
    got, _ = forward_no_grad(policy, batch, chunk=64, micro=8)
    for i, role in enumerate(order):
        want, _, _ = token_logprobs(
            policy.models[role], batch.input_ids[i : i + 1], batch.attention_mask[i : i + 1]
        )
        torch.testing.assert_close(got[i], (want * batch.loss_mask[i : i + 1])[0])
    assert not torch.allclose(got[0], got[1])  # same tokens, two policies
    reference = frozen_copy(policy)  # algo.kl_coef > 0: a reference model per role
    assert role_policies(reference) == ROLES
    torch.testing.assert_close(forward_no_grad(reference, batch, chunk=64, micro=8)[0], got)


def grpo_step(policy, tokenizer, rewards, optimizer=None):
    """One GRPO update over a solver group and a verifier group with the given rewards."""
    cfg = load_config(None, ["algo.name=grpo", "optim.lr=1e-2", "optim.weight_decay=0.1"])
    texts = [("solver", "it is 3"), ("solver", "it is 4"), ("verifier", "yes"), ("verifier", "no")]
    rows = [sample(tokenizer, t, r, w) for (r, t), w in zip(texts, rewards, strict=True)]
    batch = collate(rows, tokenizer.pad_token_id)
    batch.episode_index = torch.arange(len(rows))
    batch.group_ids = torch.tensor([0, 0, 1, 1])  # each role's pair is one group here
    compute_advantages(batch, cfg.algo)
    if optimizer is None:
        optimizer = adamw([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    update(policy, optimizer, batch, cfg)
    return optimizer


def test_an_update_where_only_one_role_has_advantage_moves_only_its_model():
    policy, tokenizer = role_models()
    before = snapshot(policy)
    grpo_step(policy, tokenizer, [1.0, 0.0, 1.0, 1.0])  # the verifier's group is constant
    changed = moved(before, policy)
    assert changed and all(n.startswith("models.solver.") for n in changed)
    assert not moved(snapshot(policy.models["verifier"]), policy.models["verifier"])


def test_a_frozen_roles_model_is_bit_identical_after_steps_with_advantage():
    policy, tokenizer = role_models(trained=("verifier",))
    before = snapshot(policy)
    optimizer = grpo_step(policy, tokenizer, [1.0, 0.0, 1.0, 0.0])  # both groups carry one
    grpo_step(policy, tokenizer, [0.0, 1.0, 0.0, 1.0], optimizer)
    changed = moved(before, policy)
    assert changed and all(n.startswith("models.verifier.") for n in changed)


def test_the_generator_decodes_each_role_with_its_own_model():
    policy, tokenizer = role_models()
    cfg = load_config(None, ["model.name=tiny"])
    generator = make_generator(cfg, policy, tokenizer)
    assert isinstance(generator, RoleGenerators) and shares_weights(generator, policy)
    assert all(generator.generators[r].model is policy.models[r] for r in ROLES)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)

    def act(episodes, budgets, turn):
        return generator.generate([ep.token_ids for ep in episodes], params)

    with pytest.raises(ValueError, match="inside as_role"):
        act(role_episodes(tokenizer, ["solver"]), [6], 0)
    episodes = role_episodes(tokenizer, ["solver", "verifier", "solver"])
    first = role_actor(act, generator)(episodes, [6, 6, 6], 0)
    assert policy.active is None
    assert first[0].logprobs[0] != first[1].logprobs[0]  # one prompt and seed, two policies
    with torch.no_grad():  # move the verifier's model only: only its tokens may change
        for param in policy.models["verifier"].parameters():
            param.mul_(1.5)
    sync_weights(generator, policy)
    again = role_actor(act, generator)(episodes, [6, 6, 6], 0)
    for i in (0, 2):
        assert (again[i].token_ids, again[i].logprobs) == (first[i].token_ids, first[i].logprobs)
    assert again[1].logprobs != first[1].logprobs
    assert role_actor(act, make_generator(cfg, load_policy(TINY)[0], tokenizer)) is act


def test_in_bf16_each_roles_generator_decodes_from_its_own_copy_of_its_model():
    policy, tokenizer = role_models()
    cfg = load_config(None, ["model.name=tiny", "rollout.mixed_precision=bf16"])
    generator = make_generator(cfg, policy, tokenizer)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)
    episodes = role_episodes(tokenizer, ["verifier", "solver"])

    def act(episodes, budgets, turn):
        return generator.generate([ep.token_ids for ep in episodes], params)

    got = role_actor(act, generator)(episodes, [6, 6], 0)
    for ep, reply in zip(episodes, got, strict=True):
        alone = HFGenerator(policy.models[ep.role], tokenizer, mixed_precision="bf16")
        (want,) = alone.generate([ep.token_ids], params)
        assert (reply.token_ids, reply.logprobs) == (want.token_ids, want.logprobs)


def test_checkpoints_restore_every_roles_model_and_their_optimizer_state(tmp_path):
    policy, tokenizer = role_models(seed=0)
    optimizer = grpo_step(policy, tokenizer, [1.0, 0.0, 1.0, 0.0])
    save_checkpoint(tmp_path, 3, policy, optimizer, None, {"note": 1})
    step_dir = latest_checkpoint(tmp_path)
    keys = load_file(str(step_dir / MODEL_FILE)).keys()
    assert {k.split(".")[1] for k in keys} == set(ROLES)  # models.<role>.* in one file
    fresh, _ = role_models(seed=5)  # other weights everywhere
    fresh_optimizer = adamw([p for p in fresh.parameters() if p.requires_grad], lr=1e-2)
    assert load_checkpoint(step_dir, fresh, fresh_optimizer)["step"] == 3
    for (name, a), b in zip(policy.named_parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b), name
    for role in ROLES:
        model = fresh.models[role]
        assert model.lm_head.weight is model.model.embed_tokens.weight
    saved, loaded = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert saved.keys() == loaded.keys() and len(saved) > 0
    for k in saved:
        assert all(torch.equal(saved[k][s], loaded[k][s]) for s in saved[k]), k


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.role_policies=model"], "model.role_policies: 'model' is not one of shared"),
        (["model.lora_rank=8"], "role_policies=adapters"),
        (
            ["rollout.backend=vllm"],
            "rollout.backend: a separate generator \\(vllm\\) holds one model",
        ),
        (["algo.name=ppo", "algo.role_groups=false"], "critic is one model"),
        (["learner.strategy=fsdp2"], "learner.strategy: the sharded learner"),
        (["dpo.failure_tasks=4"], "dpo.failure_tasks"),
        (["rollout.max_staleness=1"], "rollout.max_staleness"),
        (["distill.teacher=some/run"], "distill.teacher"),
    ],
)
def test_settings_a_model_per_role_cannot_run_with_are_refused(overrides, message):
    base = ["model.name=tiny", "model.lora_rank=0", "model.role_policies=models"]
    with pytest.raises(ConfigError, match=message):
        load_config("solver_verifier", [*base, *overrides])


def test_a_model_per_role_needs_a_multi_agent_env():
    with pytest.raises(ConfigError, match="model.role_policies=models act on a multi-agent env"):
        load_config("calculator_grpo", ["model.name=tiny", "model.role_policies=models"])
    cfg = load_config("solver_verifier", ["model.lora_rank=0", "model.role_policies=models"])
    assert cfg.model.role_policies == "models"
    shared = load_config("solver_verifier", ["model.role_policies=shared"])
    assert shared.model.role_policies == "shared"  # (LoRA with one shared adapter: allowed)

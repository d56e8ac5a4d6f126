"""A team's export (trainer.export_model=true with model.role_policies adapters or models): a
model directory per role in RUN/model/roles/<role>/ and RUN/model/roles.json.

Checked on short tiny-model runs of the solver / verifier team (warm start on each role's
demonstrations, one RL step): every role's directory loads with plain transformers and with
model.name=DIR, its logits equal the in-run policy's for that role (the same computation, so
fp32 rounding only), trained roles' weights differ, a frozen role's directory holds the base
model's weights exactly, the manifest names the roles and which trained, and `agentic-rl
export` of the run's last checkpoint writes the same team."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentic_rl.checkpoint.export import export_checkpoint
from agentic_rl.config.load import load_config
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.load import load_policy
from agentic_rl.model.roles import TEAM_MANIFEST, as_role
from agentic_rl.train import loop

ROLES = ("solver", "verifier")
POLICIES = {
    "adapters": ["model.role_policies=adapters", "model.lora_rank=8"],
    "models": ["model.role_policies=models", "model.lora_rank=0"],
}


def _run(tmp_path, monkeypatch, policies, extra=()):
    """Train a short run that exports; returns (cfg, the policy handed to the export, RUN)."""
    exported = []
    real = loop.save_model

    def recording(model, *args, **kwargs):
        exported.append(model)
        return real(model, *args, **kwargs)

    monkeypatch.setattr(loop, "save_model", recording)
    cfg = load_config(
        "solver_verifier",
        [
            "model.name=tiny",
            *POLICIES[policies],
            *extra,
            "env.num_train_tasks=8",
            "env.num_eval_tasks=1",
            "env.options.max_attempts=1",  # calc, answer, calc, verdict: 4 conversations
            "rollout.max_turns=4",
            "rollout.max_tokens_per_turn=16",  # the scripted demonstrations fit
            "rollout.tasks_per_step=1",
            "rollout.group_size=2",
            "rollout.eval_batch_size=1",
            "optim.micro_batch_size=4",
            "warm_start.num_tasks=4",  # each (trained) role learns its own demonstrations
            "warm_start.batch_size=4",
            "algo.entropy_coef=0.01",  # random-token episodes all score alike: keep updates
            "trainer.steps=1",
            "trainer.max_minutes=0",
            "trainer.export_model=true",
            "trainer.eval_before=false",
            "trainer.tensorboard=false",
            "trainer.progress=false",
            f"trainer.out_dir={tmp_path}",
            "trainer.run_name=team",
        ],
    )
    loop.train(cfg)
    assert len(exported) == 1
    return cfg, exported[0], tmp_path / "team"


def _weights(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()


@pytest.mark.parametrize("policies", list(POLICIES))
def test_each_roles_exported_model_is_its_in_run_policy(tmp_path, monkeypatch, policies):
    cfg, policy, run = _run(tmp_path, monkeypatch, policies)
    team = run / "model"
    manifest = json.loads((team / TEAM_MANIFEST).read_text())
    assert manifest["role_policies"] == policies and manifest["base_model"] == "tiny"
    assert manifest["roles"] == [
        {"role": role, "path": f"roles/{role}", "trained": True} for role in ROLES
    ]
    ids = torch.tensor([[1, 5, 42, 7, 300, 11, 2, 9]])
    policy.eval()
    for role in ROLES:
        path = team / "roles" / role
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad(), as_role(policy, role) as module:
            expected = module(input_ids=ids).logits
            got = model(input_ids=ids).logits
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
        card = (path / "README.md").read_text()
        assert f"role: `{role}`" in card
        assert json.loads((path / "generation_config.json").read_text())["stop_strings"]
    solver, verifier = (_weights(team / "roles" / role) for role in ROLES)
    assert solver.keys() == verifier.keys()
    assert any(not torch.equal(solver[k], verifier[k]) for k in solver)  # two policies
    # the solver opens the episode: its card shows the opening messages, the verifier's none
    assert (team / "roles" / "solver" / "chat_example.json").is_file()
    assert not (team / "roles" / "verifier" / "chat_example.json").exists()
    # this project loads a role's directory as a model
    loaded, _ = load_policy(ModelConfig(name=str(team / "roles" / "verifier")))
    assert all(torch.equal(loaded.state_dict()[k], verifier[k]) for k in verifier)
    # `agentic-rl export` of the run's last checkpoint rebuilds the team as the run did
    again = export_checkpoint(run, tmp_path / "again")
    assert json.loads((again / TEAM_MANIFEST).read_text())["roles"] == manifest["roles"]
    for role, weights in zip(ROLES, (solver, verifier), strict=True):
        other = _weights(again / "roles" / role)
        assert all(torch.equal(other[k], weights[k]) for k in weights), role


@pytest.mark.parametrize("policies", list(POLICIES))
def test_a_frozen_role_is_exported_as_the_base_model(tmp_path, monkeypatch, policies):
    cfg, _, run = _run(tmp_path, monkeypatch, policies, ["rollout.train_roles=[verifier]"])
    team = run / "model"
    manifest = json.loads((team / TEAM_MANIFEST).read_text())
    trained = {entry["role"]: entry["trained"] for entry in manifest["roles"]}
    assert trained == {"solver": False, "verifier": True}
    base, _ = load_policy(ModelConfig(name="tiny"), seed=cfg.trainer.seed)
    base_weights = base.state_dict()
    solver, verifier = (_weights(team / "roles" / role) for role in ROLES)
    assert solver.keys() == base_weights.keys()
    assert all(torch.equal(solver[k], base_weights[k]) for k in solver)
    assert any(not torch.equal(verifier[k], base_weights[k]) for k in verifier)


def test_an_exported_team_loads_back_as_a_team(tmp_path, monkeypatch):
    """model.name=TEAM_DIR with model.role_policies=models: each role starts from the model
    its directory holds (the same logits), trains only if rollout.train_roles says so; a
    team directory cannot be read as one shared model or for an env with other roles."""
    from agentic_rl.config.parse import ConfigError
    from agentic_rl.model.roles import RoleModels
    from agentic_rl.train.setup import build

    _, _, run = _run(tmp_path, monkeypatch, "adapters")
    team = run / "model"
    base = ["model.name=" + str(team), "model.lora_rank=0", "env.num_eval_tasks=1"]
    setup = build(
        load_config(
            "solver_verifier",
            [*base, "model.role_policies=models", "rollout.train_roles=[verifier]"],
        )
    )
    assert isinstance(setup.policy, RoleModels) and setup.policy.roles == ROLES
    ids = torch.tensor([[1, 5, 42, 7, 300, 11, 2, 9]])
    for role in ROLES:
        exported = AutoModelForCausalLM.from_pretrained(team / "roles" / role).eval()
        with torch.no_grad(), as_role(setup.policy.eval(), role) as module:
            torch.testing.assert_close(
                module(input_ids=ids).logits, exported(input_ids=ids).logits, rtol=0, atol=1e-5
            )
        trains = any(p.requires_grad for p in setup.policy.models[role].parameters())
        assert trains == (role == "verifier")
    with pytest.raises(ConfigError, match="set model.role_policies=models"):
        load_config("solver_verifier", [*base, "model.role_policies=shared"])
    with pytest.raises(ConfigError, match=r"team of roles \['solver', 'verifier'\]"):
        load_config("debate", [*base, "model.role_policies=models"])

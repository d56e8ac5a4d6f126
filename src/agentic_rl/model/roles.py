"""A policy per role (model.role_policies): which roles of a multi-agent env have parameters of
their own, and computing as one of them.

The three choices (config/rollout.py `ROLE_POLICIES`):

- "shared": one model plays every role, told apart by its role prompt (MATPO); nothing here acts
  (`role_policies` is empty);
- "adapters": a LoRA adapter per role on one frozen base (model/lora.py `add_role_adapters`);
  the roles are the PEFT policy's named adapters and computing as a role activates its adapter;
- "models": a full copy of the model per role (`RoleModels`, made by `RoleModels.copies`): n
  roles hold n times the parameters, and the optimizer keeps n sets of moments.

Whoever computes for a role (the generator's role rounds, rollout/roles.py `role_actor`; the
learner's role-homogeneous micro-batches, learner/update.py; each role's warm start,
train/loop.py) asks `role_policies(policy)` for the roles and computes inside
`as_role(policy, role)`, which yields the module to run: the one PEFT policy with that role's
adapter active, or that role's own model. One seam, so adapters and full models take the same
code path everywhere above the model layer.

Like a PEFT policy's active adapter, a `RoleModels` records the role being computed
(`RoleModels.active`): its generator (backends/roles.py `RoleGenerators`) decodes with the
active role's model, so the rollout's actors need not know which kind of role policy runs.

An exported team (checkpoint/export.py `save_policy`: DIR/roles/<role>/ and DIR/roles.json) is
loaded back with model.name=DIR and model.role_policies=models (`load_role_policies`): each
role gets the model directory it was exported to, so a trained team can be trained further,
evaluated or served (`agentic-rl serve-policy`) as one.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from torch import nn

from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model.load import ModelLoadError, load_policy
from agentic_rl.model.lora import adapter_parameters, add_role_adapters, role_adapters, use_adapter

TEAM_ROLES_DIR = "roles"
"""An exported team's DIR/roles/<role>/: that role's Hugging Face model directory."""
TEAM_MANIFEST = "roles.json"
"""An exported team's DIR/roles.json: its roles, their directories and which of them trained."""


class RoleModels(nn.Module):
    """model.role_policies=models: each role of a multi-agent env its own full model.

    `models[role]` is a complete transformers model; the container only groups them, so that
    `parameters()` (the optimizer, the device move), `state_dict()` (checkpoints, the
    reference's copy) and `train()` / `eval()` cover every role at once. Nothing calls the
    container's forward: computing goes through `as_role`, which hands out one role's model.
    `active` is the role computed right now (set by `as_role`), None outside it."""

    def __init__(self, models: Mapping[str, nn.Module]) -> None:
        super().__init__()
        bad = [r for r in models if not r.isidentifier()]
        if not models or bad:
            raise ValueError(
                f"role models need role names that are identifiers, got {list(models)}"
            )
        self.models = nn.ModuleDict(dict(models))
        self.active: str | None = None

    @classmethod
    def copies(
        cls, model: nn.Module, roles: Sequence[str], trained: Sequence[str] = ()
    ) -> RoleModels:
        """A model per role with the same initial weights, loaded once: `model` itself becomes
        the first role's, every other role gets a deep copy of it (n - 1 copies: no moment
        with n + 1 models in memory). Only the models of `trained` (rollout.train_roles;
        empty = every role) require gradients: a frozen role's model is in no optimizer and
        never moves."""
        models = {role: model if k == 0 else copy.deepcopy(model) for k, role in enumerate(roles)}
        for role, member in models.items():
            for param in member.parameters():
                param.requires_grad_(not trained or role in trained)
        return cls(models)

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.models)

    def forward(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            "RoleModels holds a model per role (model.role_policies=models): compute with "
            "`as_role(policy, role)`, which yields the role's own model"
        )


def with_role_policies(
    policy: nn.Module, cfg: ModelConfig, roles: Sequence[str], trained: Sequence[str] = ()
) -> nn.Module:
    """`policy` (as `load_policy` made it) given a policy per role as `cfg.role_policies` says:
    an adapter per role added in place, or a `RoleModels` of copies; unchanged for "shared".
    One function for the run's setup and for exporting a run's checkpoint, so the exported
    team is built exactly as the run trained it. `trained` as in `RoleModels.copies`."""
    if cfg.role_policies == "adapters":
        add_role_adapters(policy, roles, cfg, trained)
    elif cfg.role_policies == "models":
        return RoleModels.copies(policy, roles, trained)
    return policy


def team_manifest(model_name: str) -> dict[str, Any] | None:
    """The manifest of an exported team at `model_name` (DIR/roles.json), None when
    `model_name` is no such directory (a model directory, the bundled model's name)."""
    path = Path(model_name).expanduser() / TEAM_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        entries = {entry["role"]: str(entry["path"]) for entry in manifest["roles"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ModelLoadError(f"{path} is not a team manifest written by the export: {err}") from err
    return {**manifest, "paths": entries}


def load_role_policies(
    cfg: ModelConfig, roles: Sequence[str], trained: Sequence[str] = (), seed: int = 0
) -> tuple[nn.Module, Any]:
    """The run's policy and tokenizer: `load_policy` given a policy per role as
    `cfg.role_policies` says (`with_role_policies`), or, when model.name is an exported team
    (`team_manifest`), a `RoleModels` of each role's exported model (`trained` as in
    `RoleModels.copies`; the tokenizer is the first role's). One function for a run's setup
    and for exporting its checkpoints, so both build the team alike."""
    manifest = team_manifest(cfg.name)
    if manifest is None:
        policy, tokenizer = load_policy(cfg, seed=seed)
        return with_role_policies(policy, cfg, roles, trained), tokenizer
    paths = manifest["paths"]
    if sorted(paths) != sorted(roles):
        raise ModelLoadError(
            f"model.name={cfg.name} is a team of roles {sorted(paths)}, but the env's roles are "
            f"{sorted(roles)}"
        )
    team_dir = Path(cfg.name).expanduser()
    models, tokenizer = {}, None
    for role in roles:
        role_cfg = dataclasses.replace(
            cfg, name=str(team_dir / paths[role]), role_policies="shared"
        )
        models[role], role_tokenizer = load_policy(role_cfg, seed=seed)
        tokenizer = tokenizer or role_tokenizer
        for param in models[role].parameters():
            param.requires_grad_(not trained or role in trained)
    return RoleModels(models), tokenizer


def role_trains(model: nn.Module, role: str) -> bool:
    """Whether `role`'s own policy in `model` learns: its adapter's or its model's parameters
    require gradients (a role rollout.train_roles leaves out has none that do)."""
    if isinstance(model, RoleModels):
        params = list(model.models[role].parameters())
    else:
        params = adapter_parameters(model, role)
    return any(p.requires_grad for p in params)


def role_policies(model: nn.Module) -> tuple[str, ...]:
    """The roles with a policy of their own in `model`: a `RoleModels`' roles, a PEFT policy's
    role adapters (also on its unwrapped base, the HF generator's model); () for a model every
    role shares."""
    if isinstance(model, RoleModels):
        return model.roles
    return role_adapters(model)


@contextlib.contextmanager
def as_role(model: nn.Module, role: str | None) -> Iterator[nn.Module]:
    """Compute as `role`: yields the module whose forward passes are that role's policy, and
    restores the role active before on exit.

    A `RoleModels`: the role's own model (recorded as `active` for its generator). A PEFT
    policy with role adapters: `model` itself with the role's adapter active (`use_adapter`).
    `role` None: `model` unchanged (a model every role shares, or a sample without a role);
    a `RoleModels` has no such policy and refuses it."""
    if not isinstance(model, RoleModels):
        with use_adapter(model, role):
            yield model
        return
    if role is None or role not in model.models:
        raise ValueError(
            f"no model for role {role!r} in the policy (model.role_policies=models; its roles: "
            f"{', '.join(model.roles)})"
        )
    before = model.active
    model.active = role
    try:
        yield model.models[role]
    finally:
        model.active = before

"""The generator of model.role_policies=models: one HF generator per role, each on that role's
own model (the learner's object: updates are seen at once, nothing is copied).

The rollout's actors call one generator; `RoleGenerators.generate` decodes with the generator of
the role the policy is computing as (`RoleModels.active`, set by model/roles.py `as_role`, which
rollout/roles.py `role_actor` enters for each role's share of a round). Each role's generator
keeps its own KV store, so the planner's context stays cached while the executor speaks (with
role adapters one model's KV is dropped at every switch instead), and with
rollout.mixed_precision=bf16 its own bf16 copy of its role's weights.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from agentic_rl.model.roles import RoleModels
from agentic_rl.types import Completion, ImageRef, SamplingParams


class RoleGenerators:
    """A `Generator` over a `RoleModels` policy: `generators[role]` decodes `role`'s turns."""

    def __init__(self, model: RoleModels, generators: Mapping[str, Any]) -> None:
        if set(generators) != set(model.roles):
            raise ValueError(
                f"a generator per role: got {sorted(generators)} for roles {list(model.roles)}"
            )
        self.model = model  # the learner's own object (backends/base.py shares_weights)
        self.generators = dict(generators)
        self.tokenizer = next(iter(self.generators.values())).tokenizer

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        """Decode with the active role's generator (`as_role`); no active role is an error:
        there is no policy shared by the roles to fall back on."""
        role = self.model.active
        if role is None:
            raise ValueError(
                "model.role_policies=models decodes each role with its own model: call the "
                "generator inside as_role(policy, role) (rollout/roles.py role_actor)"
            )
        return self.generators[role].generate(prompts, params, images)

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """New weights: every role's cached KV is stale. A state dict (the `RoleModels`' own
        keys, `models.<role>.*`) is loaded into the role models first."""
        if state is not None:
            self.model.load_state_dict(dict(state))
        for generator in self.generators.values():
            generator.update_weights(None)

    def sleep(self) -> None:
        """The learner's turn: every role's generator drops its kept KV (backends/hf.py)."""
        for generator in self.generators.values():
            sleep = getattr(generator, "sleep", None)
            if callable(sleep):
                sleep()

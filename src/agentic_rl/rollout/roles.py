"""A policy per role while playing (model.role_policies adapters or models): each role's
conversations are decoded with that role's own policy.

A round of a multi-agent rollout (rollout/memory.py) asks the actor for one reply per live
episode; the episodes' open roles differ (one team's planner, another's executor). `role_actor`
groups the round's prompts by role and makes one generate call per role inside
`as_role(policy, role)` (model/roles.py) on the generator's model, so every sampled token and
behaviour logprob is of the role's own policy: with role adapters the role's adapter is active
on the one shared model (the learner's own object, backends/hf.py), and KV the generator kept
from another adapter is dropped at each switch (it would be another policy's); with a model per
role the generator decodes with the role's own model and KV store (backends/roles.py).
`generating_as` is that switch alone, for whoever else decodes as a role (the policy server of
a team, serving/policy_server.py).

Role-specific rewards: an env adds a role's own reward term by reporting it in the step's info
as `env/<role>_reward` (`role_reward_key`; summed over the episode like every `env/` metric).
`add_role_rewards` puts each role's terms on top of the team's outcome in the reward of that
role's samples; the team's outcome stays in the step rewards of every sample.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agentic_rl.envs.multiagent import role_reward_key
from agentic_rl.model.roles import RoleModels, as_role, role_policies
from agentic_rl.rollout.actors import Actor
from agentic_rl.rollout.episode import Episode
from agentic_rl.types import Completion, Trajectory


def add_role_rewards(episodes: list[list[Trajectory]]) -> None:
    """Each sample's reward += its role's own reward terms of its episode (the env's
    `role_reward_key` infos, summed over the episode into the samples' metrics). In place."""
    for samples in episodes:
        for sample in samples:
            if sample.role:
                sample.reward += sample.metrics.get(role_reward_key(sample.role), 0.0)


@contextlib.contextmanager
def generating_as(generator: Any, role: str) -> Iterator[None]:
    """Decode with `generator` as `role`: its model's role policy switched in (`as_role`) and,
    for role adapters on one shared model, the generator's kept KV dropped before and after
    (it would be another adapter's). `role` "" decodes as the model is."""
    if not role:
        yield
        return
    model = generator.model
    shared_kv = not isinstance(model, RoleModels)
    with as_role(model, role):
        if shared_kv:
            generator.update_weights(None)
        try:
            yield
        finally:
            if shared_kv:
                generator.update_weights(None)


def role_actor(act: Actor, generator: Any) -> Actor:
    """`act` with each round split by the episodes' roles, one call per role computing as that
    role (`as_role`); `act` itself when the generator's model has no role policies."""
    model = getattr(generator, "model", None)
    roles = role_policies(model) if model is not None else ()
    if not roles:
        return act

    def by_role(episodes: list[Episode], budgets: list[int], turn: int) -> list[Completion]:
        out: list[Completion | None] = [None] * len(episodes)
        for role in dict.fromkeys(ep.role for ep in episodes):  # in order of first appearance
            if role not in roles:
                raise ValueError(
                    f"an episode's open conversation has role {role!r}, which has no policy of "
                    f"its own (model.role_policies: {', '.join(roles)})"
                )
            rows = [i for i, ep in enumerate(episodes) if ep.role == role]
            with generating_as(generator, role):
                replies = act([episodes[i] for i in rows], [budgets[i] for i in rows], turn)
            for i, reply in zip(rows, replies, strict=True):
                out[i] = reply
        return [reply for reply in out if reply is not None]

    return by_role

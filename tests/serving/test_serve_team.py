"""A team served as one endpoint (model.role_policies=adapters on the tiny model): the request's
`model` names the role, each role is sampled with its own adapter, its episodes carry the role,
and training on served episodes moves only the adapter of the role that played them."""

from __future__ import annotations

import httpx
import pytest
import torch

from agentic_rl.config.load import load_config
from agentic_rl.model.load import token_logprobs
from agentic_rl.model.lora import adapter_parameters
from agentic_rl.model.roles import as_role
from agentic_rl.serving.policy_server import PolicyService
from agentic_rl.train.setup import build

pytest.importorskip("peft")
ROLES = ("solver", "verifier")


def policy_logprobs(model, ids: list[int]) -> list[float]:
    tensor = torch.tensor([ids])
    with torch.no_grad():
        lp, _, _ = token_logprobs(model, tensor, torch.ones_like(tensor))
    return lp[0].tolist()


@pytest.fixture(scope="module")
def team():
    """The solver / verifier team with an adapter each; the verifier's adapter is moved off
    zero (LoRA starts as the base), so the two roles are two different policies."""
    cfg = load_config(
        "solver_verifier",
        ["model.name=tiny", "model.role_policies=adapters", "model.lora_rank=8", "optim.lr=0.05"],
    )
    setup = build(cfg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in adapter_parameters(setup.policy, "verifier"):
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    return setup


def _chat(client, role: str, episode: str, text: str = "What is 2 + 3?"):
    return client.chat.completions.create(
        model=role,
        messages=[{"role": "user", "content": text}],
        max_tokens=6,
        temperature=1.0,
        seed=7,
        extra_headers={"X-Episode-Id": episode},
    )


def test_each_role_is_sampled_with_its_own_policy(team, serve):
    service = PolicyService.from_setup(team)
    assert service.roles == ROLES
    with serve(service) as (url, client):
        assert [m.id for m in client.models.list().data] == list(ROLES)
        assert httpx.get(f"{url}/health").json()["roles"] == list(ROLES)
        for role in ROLES:
            reply = _chat(client, role, f"{role}-1")
            assert reply.model == role
    for role in ROLES:
        episode = service.recorder.get(f"{role}-1")
        assert episode.role == role and episode.summary()["role"] == role
        (segment,) = episode.segments
        start, end = segment.turn_spans[0]
        with as_role(team.policy, role) as model:
            mine = policy_logprobs(model, segment.token_ids)[start:end]
        other = "verifier" if role == "solver" else "solver"
        with as_role(team.policy, other) as model:
            theirs = policy_logprobs(model, segment.token_ids)[start:end]
        # the behaviour logprobs are the role's own policy's, not the other role's
        assert segment.logprobs[start:end] == pytest.approx(mine, abs=2e-4)
        assert max(abs(a - b) for a, b in zip(mine, theirs, strict=True)) > 1e-2


def test_a_team_request_must_name_a_role(team, serve):
    service = PolicyService.from_setup(team)
    with serve(service) as (url, _):
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        missing = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        unknown = httpx.post(
            f"{url}/v1/chat/completions", json={**body, "model": "judge"}, timeout=60
        )
        not_text = httpx.post(f"{url}/v1/chat/completions", json={**body, "model": 3}, timeout=60)
    assert missing.status_code == 400 and "solver, verifier" in missing.json()["error"]["message"]
    assert unknown.status_code == 404 and "'judge'" in unknown.json()["error"]["message"]
    assert not_text.status_code == 400 and not_text.json()["error"]["param"] == "model"


def test_an_episode_is_played_by_one_role(team, serve):
    service = PolicyService.from_setup(team)
    with serve(service) as (url, client):
        _chat(client, "solver", "shared-id")
        body = {
            "model": "verifier",
            "messages": [{"role": "user", "content": "What is 2 + 3?"}],
            "max_tokens": 2,
        }
        clash = httpx.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers={"X-Episode-Id": "shared-id"},
            timeout=60,
        )
    assert clash.status_code == 409 and "played by role 'solver'" in clash.text


def test_training_on_a_roles_episodes_moves_only_that_roles_adapter(team, serve):
    """Two verifier episodes of one question (rewards 1 and 0: one group of the verifier's)
    train the verifier's adapter; the solver's adapter does not move."""
    service = PolicyService.from_setup(team, train_every=2, group_size=2)
    params = {role: adapter_parameters(team.policy, role) for role in ROLES}
    before = {role: [p.detach().clone() for p in params[role]] for role in ROLES}
    state = {k: v.clone() for k, v in team.policy.state_dict().items()}
    try:
        with serve(service) as (url, client):
            for episode in ("v1", "v2"):
                _chat(client, "verifier", episode)
            updates = [
                httpx.post(f"{url}/v1/episodes/{e}/reward", json={"reward": r}, timeout=60).json()
                for e, r in (("v1", 1.0), ("v2", 0.0))
            ]
        after = {role: [p.detach().clone() for p in params[role]] for role in ROLES}
    finally:
        team.policy.load_state_dict(state)
    assert updates[0]["update"] is None
    update = updates[1]["update"]
    assert update["samples"] == 2 and update["skipped_update"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before["solver"], after["solver"], strict=True))
    assert any(
        not torch.equal(a, b) for a, b in zip(before["verifier"], after["verifier"], strict=True)
    )


def test_a_frozen_role_acts_but_its_served_episodes_never_train(serve):
    """rollout.train_roles=[verifier]: the solver answers with its (frozen) adapter, its
    recorded episodes carry loss mask 0, and an update on both roles' episodes moves only the
    verifier's adapter."""
    cfg = load_config(
        "solver_verifier",
        [
            "model.name=tiny",
            "model.role_policies=adapters",
            "model.lora_rank=8",
            "optim.lr=0.05",
            "rollout.train_roles=[verifier]",
        ],
    )
    setup = build(cfg)
    service = PolicyService.from_setup(setup, group_size=2)
    params = {role: adapter_parameters(setup.policy, role) for role in ROLES}
    before = {role: [p.detach().clone() for p in params[role]] for role in ROLES}
    with serve(service) as (url, client):
        for role in ROLES:
            for k, reward in enumerate((1.0, 0.0)):
                _chat(client, role, f"{role}-{k}")
                httpx.post(
                    f"{url}/v1/episodes/{role}-{k}/reward", json={"reward": reward}, timeout=60
                ).raise_for_status()
    episodes = service.take_finished()
    masks = {s[0].role: sum(s[0].loss_mask) for s in episodes.samples}
    assert masks["solver"] == 0 and masks["verifier"] > 0
    update = service.train(episodes)
    assert update["skipped_update"] == 0.0
    for role, moved in (("solver", False), ("verifier", True)):
        now = [p.detach() for p in params[role]]
        changed = any(not torch.equal(a, b) for a, b in zip(before[role], now, strict=True))
        assert changed == moved, role

"""Fuzz the policy server from its own OpenAPI schema (schemathesis): chat completions, rewards
and episode routes with valid and invalid bodies may never reach a 5xx, and every request must
be answered (each call has a timeout, so a hang fails the test instead of stalling it)."""

from __future__ import annotations

import pytest

pytest.importorskip("schemathesis")
from fuzzing import fuzz_server  # noqa: E402

from agentic_rl.retrieval.server import BackgroundServer  # noqa: E402
from agentic_rl.serving.batching import ServeLimits  # noqa: E402
from agentic_rl.serving.policy_server import PolicyService, create_app  # noqa: E402

TOKEN = "fuzz-token"


@pytest.mark.fuzz
def test_policy_server_never_answers_5xx(setup):
    # A small context keeps each generation short on the tiny model.
    limits = ServeLimits(default_max_tokens=4, max_context=160, max_batch=8)
    service = PolicyService(setup.generator, setup.tokenizer, limits=limits, episode_ttl_s=60)
    with BackgroundServer(create_app(service, token=TOKEN)) as server:
        calls = fuzz_server(server.url, TOKEN, max_examples=50)
    print(f"fuzz calls per operation: {dict(calls)}")  # the figures in bench/README.md
    assert calls["POST /v1/chat/completions"] >= 25
    assert calls["POST /v1/episodes/{episode_id}/reward"] >= 25

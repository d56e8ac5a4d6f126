"""Fuzz the policy server from its own OpenAPI schema (schemathesis): chat completions, rewards
and episode routes with valid and invalid bodies may never reach a 5xx, and every request must
be answered (each call has a timeout, so a hang fails the test instead of stalling it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

from agentic_rl.retrieval.server import BackgroundServer  # noqa: E402
from agentic_rl.serving.batching import ServeLimits  # noqa: E402
from agentic_rl.serving.policy_server import PolicyService, create_app  # noqa: E402

TOKEN = "fuzz-token"


def fuzz_server(url: str, token: str, max_examples: int = 50) -> Counter:
    """Every operation of the server's OpenAPI schema, `max_examples` generated cases each
    (about half valid, half invalid: schemathesis' positive and negative modes), sent over real HTTP with a
    timeout; fails on any 5xx. Returns the calls made per operation (and per status)."""
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    schema.config.update(base_url=url, headers={"Authorization": f"Bearer {token}"})
    calls: Counter = Counter()
    for result in schema.get_all_operations():
        _fuzz_operation(result.ok(), max_examples, calls)
    return calls


def _fuzz_operation(operation: Any, max_examples: int, calls: Counter) -> None:
    valid = operation.as_strategy(GenerationMode.POSITIVE)
    invalid = operation.as_strategy(GenerationMode.NEGATIVE)

    @given(case=valid | invalid)
    @settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    def check(case: Any) -> None:
        response = case.call(timeout=30)  # a hang is a failure, not a stalled suite
        calls[operation.label] += 1
        calls[f"{operation.label} -> {response.status_code}"] += 1
        case.validate_response(response, checks=[not_a_server_error])

    check()


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

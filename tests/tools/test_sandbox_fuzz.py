"""Fuzz the sandbox service from its own OpenAPI schema (schemathesis): `/run` with valid and
invalid bodies may never reach a 5xx, and every request must be answered (each call has a
timeout, so a hang fails the test instead of stalling it). Generated code runs in the real
sandbox (it is mostly syntax errors)."""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

from agentic_rl.tools.sandbox.limits import SandboxLimits  # noqa: E402
from agentic_rl.tools.sandbox.pool import SandboxPool  # noqa: E402
from agentic_rl.tools.sandbox.server import SandboxServer  # noqa: E402

TOKEN = "fuzz-token"
HAVE_FASTAPI = all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn"))


def fuzz_server(url: str, token: str, max_examples: int = 50, schema_url: str = "") -> Counter:
    """Every operation of the server's OpenAPI schema, `max_examples` generated cases each
    (about half valid, half invalid: schemathesis' positive and negative modes), sent over real HTTP with a
    timeout; fails on any 5xx. `schema_url`: a server to read the schema from (the stdlib
    backend has none of its own). Returns the calls made per operation (and per status)."""
    schema = schemathesis.openapi.from_url(f"{schema_url or url}/openapi.json")
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
@pytest.mark.skipif(not HAVE_FASTAPI, reason="the OpenAPI schema comes from the FastAPI backend")
def test_sandbox_service_never_answers_5xx():
    """Both backends, the standard-library one fuzzed with the FastAPI one's schema."""
    limits = SandboxLimits(timeout_s=2.0, max_timeout_s=2.0, max_code_chars=2000)
    with (
        SandboxPool(2, limits) as pool,
        SandboxServer(pool, backend="fastapi", token=TOKEN) as server,
        SandboxServer(pool, backend="stdlib", token=TOKEN) as stdlib,
    ):
        calls = fuzz_server(server.url, TOKEN, max_examples=50)
        stdlib_calls = fuzz_server(stdlib.url, TOKEN, max_examples=50, schema_url=server.url)
    print(f"fuzz calls per operation: {dict(calls)}; stdlib: {dict(stdlib_calls)}")
    assert calls["POST /run"] >= 25 and calls["GET /health"] >= 1
    assert stdlib_calls["POST /run"] >= 25

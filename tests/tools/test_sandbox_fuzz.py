"""Fuzz the sandbox service from its own OpenAPI schema (schemathesis): `/run` with valid and
invalid bodies may never reach a 5xx, and every request must be answered (each call has a
timeout, so a hang fails the test instead of stalling it). Generated code runs in the real
sandbox (it is mostly syntax errors)."""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("schemathesis")
from fuzzing import fuzz_server  # noqa: E402

from agentic_rl.tools.sandbox.limits import SandboxLimits  # noqa: E402
from agentic_rl.tools.sandbox.pool import SandboxPool  # noqa: E402
from agentic_rl.tools.sandbox.server import SandboxServer  # noqa: E402

TOKEN = "fuzz-token"
HAVE_FASTAPI = all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn"))


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

"""Fuzz an HTTP server from its own OpenAPI schema (schemathesis), shared by the three servers'
fuzz tests (retrieval, sandbox, serve-policy). Import it after `pytest.importorskip("schemathesis")`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode


def fuzz_server(url: str, token: str, max_examples: int = 50, schema_url: str = "") -> Counter:
    """Every operation of the server's OpenAPI schema, `max_examples` generated cases each
    (about half valid, half invalid: schemathesis' positive and negative modes), sent over real
    HTTP with a timeout; fails on any 5xx. `schema_url`: a server to read the schema from (the
    sandbox's stdlib backend has none of its own). Returns the calls made per operation (and
    per status)."""
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

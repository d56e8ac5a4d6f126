"""The sandbox over HTTP (both backends), its client, PythonTool and the CLI hook."""

from __future__ import annotations

import argparse
import importlib.util
import json
import urllib.error
import urllib.request

import pytest

from agentic_rl.tools.base import call_tool, result_tag_of, validate_arguments
from agentic_rl.tools.sandbox.cli import add_sandbox_command
from agentic_rl.tools.sandbox.client import (
    PythonTool,
    SandboxClient,
    SandboxRequestError,
    format_result,
    strip_code_fences,
)
from agentic_rl.tools.sandbox.limits import ExecutionResult, SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.server import SandboxServer, max_body_bytes

LIMITS = SandboxLimits(timeout_s=5.0, max_code_chars=1000, max_output_chars=500)
HAVE_FASTAPI = all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn"))
BACKENDS = [
    "stdlib",
    pytest.param("fastapi", marks=pytest.mark.skipif(not HAVE_FASTAPI, reason="no fastapi")),
]


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(2, LIMITS) as pool:
        yield pool


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, pool):
    with SandboxServer(pool, backend=request.param) as server:
        yield server


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_run_and_health_over_http(server):
    client = SandboxClient(server.url)
    result = client.run("print(6 * 7)\n1 / 0", timeout_s=5)
    assert isinstance(result, ExecutionResult)
    assert result.stdout == "42\n" and result.error == "ZeroDivisionError: division by zero"
    health = client.health()
    assert health["status"] == "ok" and health["workers"] == 2 and "isolation" in health
    # Oversized code is not malformed: a 200 with the same rejected result as in process.
    result = client.run("#" * (LIMITS.max_code_chars + 1))
    assert result.error.startswith("CodeTooLarge") and result.exit_code is None


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (b"not json", 400, "not valid JSON"),
        (b"[1, 2]", 422, "JSON object"),
        (b'{"timeout_s": 1}', 422, "'code' is required"),
        (b'{"code": 5}', 422, "'code' is required"),
        (b'{"code": "1", "extra": 1}', 422, "unknown field"),
        (b'{"code": "1", "timeout_s": -1}', 422, "timeout_s"),
        (b'{"code": "1", "timeout_s": true}', 422, "timeout_s"),
        (b'{"code": "1", "timeout_s": 1000}', 422, "timeout_s"),
    ],
)
def test_malformed_requests_get_4xx(server, body, status, detail):
    got, payload = post(server.url + "/run", body)
    assert got == status and detail in payload["detail"]


def test_oversized_body_and_unknown_paths(server):
    big = json.dumps({"code": "#" * max_body_bytes(LIMITS)}).encode()
    assert post(server.url + "/run", big)[0] == 413
    assert post(server.url + "/nope", b"{}")[0] == 404
    with pytest.raises(SandboxRequestError, match="422"):
        SandboxClient(server.url).run("1", timeout_s=-1)


def test_client_reports_an_unreachable_service():
    with pytest.raises(SandboxRequestError, match="unreachable"):
        SandboxClient("http://127.0.0.1:9", connect_timeout_s=2).health()


def make_result(**changes) -> ExecutionResult:
    base = dict(stdout="", stderr="", ok=True, error="", timed_out=False, exit_code=0)
    return ExecutionResult(**{**base, "duration_s": 0.1, **changes})


def test_format_result_for_the_model():
    assert format_result(make_result(stdout="42\n"), 5) == "42"
    failed = make_result(stdout="a\n", ok=False, error="ZeroDivisionError: division by zero")
    assert format_result(failed, 5) == "a\nError: ZeroDivisionError: division by zero"
    timed = make_result(ok=False, timed_out=True, error="TimeoutError: wall time ...")
    assert format_result(timed, 2.5) == "Timed out after 2.5 s"
    cpu = make_result(ok=False, timed_out=True, error="TimeoutError: CPU time limit of 1 s")
    assert format_result(cpu, 5) == "Timed out: CPU time limit exceeded"
    long = make_result(stdout="x" * 5000, ok=False, error="ValueError: bad")
    text = format_result(long, 5, max_chars=300)
    assert len(text) <= 300 and "truncated" in text and text.endswith("Error: ValueError: bad")


def test_strip_code_fences():
    assert strip_code_fences("```python\nprint(1)\n```") == "print(1)"
    assert strip_code_fences("```\nx = 1\ny = 2\n```\n") == "x = 1\ny = 2"
    assert strip_code_fences("print('```')") == "print('```')"


def test_python_tool_in_process_and_over_http(pool, server):
    for runner in (pool, SandboxClient(server.url)):
        tool = PythonTool(runner, timeout_s=1.0)
        assert tool.name == "python" and result_tag_of(tool) == "interpreter"
        assert validate_arguments(tool, {"code": "1"}) is None
        assert validate_arguments(tool, {"cmd": "1"}) is not None
        assert tool(code="```python\nx = 21\nx * 2\n```") == "42"
        assert tool(code="import math\nmath.sqrt(-1)") == "Error: ValueError: math domain error"
        if runner is pool:  # the same path over HTTP; one wait is enough
            # A busy loop burns CPU as fast as wall time: either equal 1 s limit may fire first.
            assert tool(code="while True:\n    pass") in (
                "Timed out after 1 s",
                "Timed out: CPU time limit exceeded",
            )
        outcome = call_tool(tool, {"code": "#" * 2000}, timeout_s=30)
        assert not outcome.ok and "CodeTooLarge" in outcome.text
        outcome = call_tool(tool, {"code": "print('ok')"}, timeout_s=30)
        assert outcome.ok and outcome.text == "ok"


def test_cli_hook_adds_serve_sandbox():
    parser = argparse.ArgumentParser(prog="agentic-rl")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sandbox_command(sub)
    args = parser.parse_args(["serve-sandbox", "--port", "9123", "--workers", "3"])
    assert args.port == 9123 and args.workers == 3 and args.host == "127.0.0.1"
    assert callable(args.fn) and args.backend == "auto"


def test_serve_sandbox_has_the_allow_unisolated_switch(monkeypatch, capsys):
    from agentic_rl.tools.sandbox import cli, server
    from agentic_rl.tools.sandbox.worker_process import SandboxUnavailableError

    parser = argparse.ArgumentParser()
    cli.add_sandbox_command(parser.add_subparsers())
    assert parser.parse_args(["serve-sandbox"]).allow_unisolated is False
    args = parser.parse_args(["serve-sandbox", "--allow-unisolated", "--port", "0"])
    seen = {}

    def refuse(host, port, workers, limits, backend, **guard):
        seen["limits"] = limits
        raise SandboxUnavailableError("refusing to run model code without isolation: ...")

    monkeypatch.setattr(server, "serve_sandbox", refuse)
    assert args.fn(args) == 2  # a refusal is a clean error, not a traceback
    assert seen["limits"].allow_unisolated is True
    assert "refusing to run model code" in capsys.readouterr().out

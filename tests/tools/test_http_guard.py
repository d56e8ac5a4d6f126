"""The servers' shared edge guard (tools/http_guard.py): token, body size before and while
reading (chunked bodies), bounded in-flight requests, deep JSON; and the sandbox service's two
backends behind it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

from agentic_rl.tools.http_guard import (
    MAX_JSON_DEPTH,
    BodyError,
    Guard,
    GuardMiddleware,
    bearer_ok,
    is_loopback,
    json_depth_ok,
    loads_json,
    require_token,
)
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool
from agentic_rl.tools.sandbox.server import SandboxServer, serve_sandbox


class EchoApp:
    """ASGI app answering the length of the body it read; `gate` holds it until released."""

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None
        self.seen = 0

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen += 1
        if self.gate is not None:
            await self.gate.wait()
        data = json.dumps({"length": len(body)}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": data})


async def call(app, path="/x", chunks=(b"",), headers=()):
    """Drive an ASGI app with a body sent in `chunks`; returns (status, JSON body, chunks read)."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in headers],
    }
    pending = list(chunks)
    read = 0
    sent: list[dict] = []

    async def receive():
        nonlocal read
        if not pending:
            await asyncio.sleep(3600)  # a client that sends nothing more
        read += 1
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body), read


def test_token_is_required_when_set_and_health_stays_open():
    app = GuardMiddleware(EchoApp(), Guard(1000, token="s3cret"))
    assert asyncio.run(call(app))[0] == 401
    assert asyncio.run(call(app, headers=[("authorization", "Bearer wrong")]))[0] == 401
    assert asyncio.run(call(app, headers=[("authorization", "Bearer s3cret")]))[0] == 200
    assert asyncio.run(call(app, path="/health"))[0] == 200
    assert app.guard.refused["unauthorized"] == 2
    assert bearer_ok(None, None) and not bearer_ok("Basic s3cret", "s3cret")


def test_declared_length_over_the_limit_is_refused_without_reading():
    app = GuardMiddleware(EchoApp(), Guard(100))
    status, body, read = asyncio.run(
        call(app, chunks=[b"x" * 10], headers=[("content-length", "101")])
    )
    assert status == 413 and "larger than 100 bytes" in body["detail"] and read == 0
    assert asyncio.run(call(app, headers=[("content-length", "-1")]))[0] == 413


def test_chunked_body_is_cut_off_at_the_limit():
    app = GuardMiddleware(EchoApp(), Guard(100))
    # 1000 chunks of 40 bytes, no Content-Length: refused after the third chunk, not all read.
    status, _, read = asyncio.run(call(app, chunks=[b"y" * 40] * 1000))
    assert status == 413 and read == 3
    status, body, _ = asyncio.run(call(app, chunks=[b"z" * 50, b"z" * 50]))
    assert status == 200 and body == {"length": 100}  # exactly the limit is fine


def test_requests_beyond_max_inflight_get_503_at_once():
    inner = EchoApp()
    app = GuardMiddleware(inner, Guard(1000, max_inflight=2))

    async def scenario():
        inner.gate = asyncio.Event()
        held = [asyncio.ensure_future(call(app)) for _ in range(2)]
        while inner.seen < 2:
            await asyncio.sleep(0)
        status, body, _ = await call(app)  # answered while the two are still held
        inner.gate.set()
        return status, body, [await t for t in held]

    status, body, held = asyncio.run(scenario())
    assert status == 503 and "2 requests in flight" in body["detail"]
    assert [h[0] for h in held] == [200, 200]
    assert app.guard.inflight == 0 and app.guard.refused["busy"] == 1
    assert asyncio.run(call(app))[0] == 200  # room again


def test_deeply_nested_json_is_a_400_not_a_recursion_error():
    deep = b"[" * 100_000 + b"]" * 100_000  # json.loads raises RecursionError on this
    with pytest.raises(BodyError, match="nested more than"):
        loads_json(deep)
    shallow_but_over = json.dumps(nest(MAX_JSON_DEPTH + 1)).encode()
    with pytest.raises(BodyError, match="nested more than"):
        loads_json(shallow_but_over)
    assert loads_json(json.dumps(nest(MAX_JSON_DEPTH)).encode()) == nest(MAX_JSON_DEPTH)
    with pytest.raises(BodyError, match="not valid JSON"):
        loads_json(b"{")
    assert json_depth_ok({"a": [1, {"b": 2}]}, 3) and not json_depth_ok({"a": [1, {"b": 2}]}, 2)


def nest(depth: int):
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_non_loopback_bind_needs_a_token(monkeypatch):
    monkeypatch.delenv("AGENTIC_RL_API_TOKEN", raising=False)
    assert require_token("127.0.0.1", None, "x") is None
    assert require_token("::1", None, "x") is None
    with pytest.raises(ValueError, match="needs an access token: pass --auth-token"):
        require_token("0.0.0.0", None, "serve-sandbox")
    assert require_token("0.0.0.0", "t", "x") == "t"
    monkeypatch.setenv("AGENTIC_RL_API_TOKEN", "from-env")
    assert require_token("10.1.2.3", None, "x") == "from-env"
    assert is_loopback("localhost") and not is_loopback("example.org")


def test_serve_sandbox_refuses_a_public_bind_without_a_token(monkeypatch):
    monkeypatch.delenv("AGENTIC_RL_API_TOKEN", raising=False)
    with pytest.raises(ValueError, match="serve-sandbox bound to 0.0.0.0"):
        serve_sandbox("0.0.0.0", 0, 1)  # refused before a worker starts


def http(url: str, body: bytes | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(1, SandboxLimits(timeout_s=5.0, max_code_chars=1000)) as pool:
        yield pool


@pytest.mark.parametrize("backend", ["stdlib", "fastapi"])
def test_sandbox_service_needs_its_token_and_refuses_deep_json(pool, backend):
    from agentic_rl.tools.sandbox.client import SandboxClient, SandboxUnreachable

    with SandboxServer(pool, backend=backend, token="tok") as server:
        assert http(f"{server.url}/run", b'{"code": "print(1)"}')[0] == 401
        status, result = http(f"{server.url}/run", b'{"code": "print(1)"}', token="tok")
        assert status == 200 and result["stdout"] == "1\n"
        assert http(f"{server.url}/health")[0] == 200
        deep = b'{"code": ' + b"[" * 5000 + b"]" * 5000 + b"}"  # RecursionError in json
        status, body = http(f"{server.url}/run", deep, token="tok")
        assert status == 400 and "nested" in body["detail"]
        assert SandboxClient(server.url, token="tok").run("print(2)").stdout == "2\n"
        with pytest.raises(SandboxUnreachable, match="401"):  # infrastructure, not the model
            SandboxClient(server.url, token="wrong").run("print(2)")


def test_stdlib_sandbox_backend_answers_503_beyond_max_inflight(pool):
    with SandboxServer(pool, backend="stdlib", max_inflight=1) as server:
        server._http.slots.acquire()  # one request in flight
        try:
            status, body = http(f"{server.url}/run", b'{"code": "print(1)"}')
        finally:
            server._http.slots.release()
        assert status == 503 and "busy" in body["detail"]
        assert http(f"{server.url}/run", b'{"code": "print(1)"}')[0] == 200

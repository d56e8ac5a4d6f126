"""The sandbox pool as an HTTP service (for rollout workers on other machines or Ray actors).

    POST /run {"code": str, "timeout_s": float (optional)} -> ExecutionResult as JSON
    GET /health -> {"status": "ok", "workers", "executions", "restarts", "isolation"}

Malformed requests get a 4xx with {"detail": message}: 400 for a body that is not JSON, 413 for
one over the size limit, 422 for wrong fields. Code over `max_code_chars` is not malformed: it
gets a 200 with a rejected ExecutionResult, exactly what `SandboxPool.run` returns in-process.
FastAPI + uvicorn serve it where installed; otherwise the standard library's
ThreadingHTTPServer does (same API, fewer connections per second).

`/run` is remote code execution by design, so both backends apply the servers' shared guard
(tools/http_guard.py): a server bound to a non-loopback address refuses to start without a
bearer token, and then every request but /health needs `Authorization: Bearer <token>` (401);
the body size is checked before it is read (FastAPI: chunked bodies are counted as they arrive;
stdlib: a body without Content-Length is refused with 411); at most `max_inflight` requests
are in flight (default 8 per worker), the next gets 503 at once instead of queueing threads
without bound.
"""

from __future__ import annotations

import json
import math
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentic_rl.tools.http_guard import (
    OPEN_PATHS,
    BodyError,
    Guard,
    bearer_ok,
    loads_json,
    require_token,
)
from agentic_rl.tools.sandbox.limits import SandboxLimits
from agentic_rl.tools.sandbox.pool import SandboxPool


class RequestError(ValueError):
    """A malformed request; `status` is the HTTP code to answer with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def max_body_bytes(limits: SandboxLimits) -> int:
    # JSON may spell a character as \uXXXX (6 bytes) or a surrogate pair (12).
    return 12 * limits.max_code_chars + 4096


def parse_run_request(raw: bytes, limits: SandboxLimits) -> tuple[str, float | None]:
    """Validate a /run body; returns (code, timeout_s or None) or raises RequestError."""
    if len(raw) > max_body_bytes(limits):
        raise RequestError(f"body larger than {max_body_bytes(limits)} bytes", status=413)
    try:
        body = loads_json(raw)
    except BodyError as err:
        raise RequestError(str(err), status=err.status) from None
    if not isinstance(body, dict):
        raise RequestError("body must be a JSON object with 'code'")
    unknown = sorted(set(body) - {"code", "timeout_s"})
    if unknown:
        raise RequestError(f"unknown field(s): {', '.join(unknown)}; expected code, timeout_s")
    code = body.get("code")
    if not isinstance(code, str):
        raise RequestError("'code' is required and must be a string")
    timeout = body.get("timeout_s")
    if timeout is None:
        return code, None
    number = isinstance(timeout, int | float) and not isinstance(timeout, bool)
    if not (number and math.isfinite(timeout) and 0 < timeout <= limits.max_timeout_s):
        raise RequestError(f"'timeout_s' must be a number in (0, {limits.max_timeout_s:g}]")
    return code, float(timeout)


def handle_run(pool: SandboxPool, raw: bytes) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) for one /run request: the logic both backends share."""
    try:
        code, timeout = parse_run_request(raw, pool.limits)
    except RequestError as err:
        return err.status, {"detail": str(err)}
    return 200, pool.run(code, timeout).to_dict()


def default_max_inflight(pool: SandboxPool) -> int:
    """Requests in flight before 503: a few queued behind each worker."""
    return 8 * max(int(getattr(pool, "size", 4)), 1)


def run_openapi(limits: SandboxLimits) -> dict[str, Any]:
    """The /run request body as OpenAPI (the handler reads the raw body, so FastAPI cannot
    infer it): documents the API and lets schemathesis fuzz it."""
    schema = {
        "type": "object",
        "required": ["code"],
        "additionalProperties": False,
        "properties": {
            "code": {"type": "string"},
            "timeout_s": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "maximum": limits.max_timeout_s,
            },
        },
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def create_app(pool: SandboxPool, token: str | None = None, max_inflight: int | None = None) -> Any:
    """The FastAPI app serving `pool`; with a `token`, every route but /health needs
    `Authorization: Bearer <token>`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="agentic-rl sandbox", description="Run Python in an isolated sandbox")
    inflight = default_max_inflight(pool) if max_inflight is None else max_inflight
    Guard(max_body_bytes(pool.limits), token, inflight).install(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return pool.health()

    async def run(request):  # type: ignore[no-untyped-def]
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes(pool.limits):
            return JSONResponse({"detail": "body too large"}, status_code=413)  # do not read it
        # pool.run blocks until a worker is free: keep it off the event loop.
        status, body = await run_in_threadpool(handle_run, pool, await request.body())
        return JSONResponse(body, status_code=status)

    # This module's annotations are strings (PEP 563) and Request is imported locally, so
    # FastAPI could not resolve "Request" and would take it for a query parameter.
    run.__annotations__ = {"request": Request, "return": Any}
    app.post("/run", openapi_extra=run_openapi(pool.limits))(run)
    return app


class _Handler(BaseHTTPRequestHandler):
    """Standard-library backend; `server.pool` is the SandboxPool."""

    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _allowed(self) -> bool:
        """Token check (401 answered here when it fails)."""
        token = self.server.token  # type: ignore[attr-defined]
        if self.path.split("?")[0] in OPEN_PATHS or bearer_ok(
            self.headers.get("Authorization"), token
        ):
            return True
        self.close_connection = True  # an unread body would be parsed as a request
        self._reply(401, {"detail": "missing or wrong access token: send 'Authorization: Bearer'"})
        return False

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        if not self._allowed():
            return
        if self.path.split("?")[0] == "/health":
            self._reply(200, self.server.pool.health())  # type: ignore[attr-defined]
        else:
            self._reply(404, {"detail": "not found; use POST /run or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        pool: SandboxPool = self.server.pool  # type: ignore[attr-defined]
        if not self._allowed():
            return
        if self.path.split("?")[0] != "/run":
            self._reply(404, {"detail": "not found; use POST /run or GET /health"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._reply(411, {"detail": "Content-Length is required"})
            return
        if int(length) > max_body_bytes(pool.limits):
            self.close_connection = True  # the unread body would be parsed as a request
            self._reply(413, {"detail": "body too large"})
            return
        slots: threading.BoundedSemaphore | None = self.server.slots  # type: ignore[attr-defined]
        if slots is not None and not slots.acquire(blocking=False):
            self.close_connection = True
            self._reply(503, {"detail": "server busy: too many requests in flight; retry"})
            return
        try:
            self._reply(*handle_run(pool, self.rfile.read(int(length))))
        finally:
            if slots is not None:
                slots.release()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one line per request would drown the training logs


class SandboxServer:
    """Serve a pool over HTTP from a background thread; `url` is e.g. http://127.0.0.1:8765.

    Use as a context manager. `backend` is "fastapi", "stdlib" or "auto" (FastAPI + uvicorn
    where both import). The pool is not closed by `stop` (the caller owns it).
    """

    def __init__(
        self,
        pool: SandboxPool,
        host: str = "127.0.0.1",
        port: int = 0,
        backend: str = "auto",
        token: str | None = None,
        max_inflight: int | None = None,
    ) -> None:
        self.pool = pool
        self.backend = resolve_backend(backend)
        inflight = default_max_inflight(pool) if max_inflight is None else max_inflight
        self._thread: threading.Thread | None = None
        if self.backend == "fastapi":
            import uvicorn

            self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self.host, self.port = self._sock.getsockname()[:2]
            config = uvicorn.Config(
                create_app(pool, token, inflight),
                log_level="warning",
                access_log=False,
                lifespan="off",
            )
            self._uvicorn = uvicorn.Server(config)
        else:
            self._http = ThreadingHTTPServer((host, port), _Handler)
            self._http.daemon_threads = True
            self._http.pool = pool  # type: ignore[attr-defined]
            self._http.token = token or None  # type: ignore[attr-defined]
            self._http.slots = (  # type: ignore[attr-defined]
                threading.BoundedSemaphore(inflight) if inflight else None
            )
            self.host, self.port = self._http.server_address[:2]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in str(self.host) else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> SandboxServer:
        if self.backend == "stdlib":
            self._thread = threading.Thread(
                target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()
            return self
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._thread.is_alive():
            if self._uvicorn.started:
                return self
            time.sleep(0.01)
        raise RuntimeError(f"uvicorn did not start on {self.url} within {timeout_s} s")

    def stop(self) -> None:
        if self.backend == "stdlib":
            self._http.shutdown()
            self._http.server_close()
        else:
            self._uvicorn.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._sock.close()

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def resolve_backend(backend: str) -> str:
    """Pick the backend: for "auto", FastAPI where fastapi and uvicorn import, else stdlib."""
    if backend not in ("auto", "fastapi", "stdlib"):
        raise ValueError(f"unknown backend {backend!r}; use auto, fastapi or stdlib")
    if backend != "auto":
        return backend
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return "stdlib"
    return "fastapi"


def _raise_keyboard_interrupt(*_args: Any) -> None:
    raise KeyboardInterrupt


def serve_sandbox(
    host: str = "127.0.0.1",
    port: int = 8765,
    pool_size: int = 4,
    limits: SandboxLimits | None = None,
    backend: str = "auto",
    token: str | None = None,
    max_inflight: int | None = None,
) -> None:
    """Start a pool and serve it until interrupted (blocks). `token` (default
    $AGENTIC_RL_API_TOKEN) is required when `host` is not a loopback address."""
    token = require_token(host, token, "serve-sandbox")  # before starting any worker
    with SandboxPool(pool_size, limits) as pool:
        server = SandboxServer(pool, host, port, backend, token, max_inflight)
        checks = ", ".join(k for k, v in pool.isolation.items() if v is True)
        print(f"sandbox: {pool_size} workers ({checks}) on {server.url} [{server.backend}]")
        server.start()
        if threading.current_thread() is threading.main_thread():  # `kill` stops it cleanly too
            signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            while server._thread is not None and server._thread.is_alive():
                server._thread.join(timeout=1.0)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()

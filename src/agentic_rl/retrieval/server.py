"""HTTP retrieval server speaking Search-R1's API, so existing Search-R1 setups can point at it.

    POST /retrieve {"queries": [str], "topk": int, "return_scores": bool}
      return_scores true  -> {"result": [[{"document": {"id", "contents"}, "score": float}]]}
      return_scores false -> {"result": [[{"id", "contents"}]]}        (Search-R1's default)
    GET /health -> {"status": "ok", "kind", "num_docs", ...}

As in Search-R1's retrieval_server.py, `topk` may be omitted or null (the server's default is
used) and `return_scores` defaults to false. Stricter than Search-R1: topk must be an integer in
[1, max_topk] (Search-R1 silently treats 0 as the default), and malformed bodies get a 4xx with
a message instead of a stack trace (deeply nested JSON included). In front of every route sits
the servers' shared guard (tools/http_guard.py): the body size is checked before and while it
is read (chunked bodies too), at most `max_inflight` requests are in flight (the next gets 503
at once, so the batcher's queue cannot grow without bound), and a server bound to a
non-loopback address refuses to start without a bearer token. Retrieval runs in a worker thread, so the event loop keeps
accepting requests; concurrent requests with the same topk can be merged into one batched
retrieval call (`batch_wait_ms` > 0), which is what makes dense retrieval fast under load.
"""

# No `from __future__ import annotations` here: FastAPI must resolve the `Request` annotation of
# the handlers at runtime, and that class is imported inside create_app to keep imports lazy.
import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.retrieval.index import Retriever
from agentic_rl.tools.http_guard import BodyError, Guard, loads_json, require_token

DEFAULT_TOPK = 3
MAX_TOPK = 100
MAX_QUERIES = 512
MAX_QUERY_CHARS = 4096
MAX_BODY_BYTES = 4 << 20
MAX_INFLIGHT = 256


class RequestError(ValueError):
    """A malformed /retrieve request; `status` is the HTTP code to answer with."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """Request limits and defaults; a request outside them gets a 4xx, never a crash."""

    default_topk: int = DEFAULT_TOPK
    max_topk: int = MAX_TOPK
    max_queries: int = MAX_QUERIES
    max_query_chars: int = MAX_QUERY_CHARS
    max_body_bytes: int = MAX_BODY_BYTES
    max_inflight: int = MAX_INFLIGHT
    """Requests in flight at once; more get 503 (0: unbounded)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_retrieve_request(raw: bytes, limits: Limits) -> tuple[list[str], int, bool]:
    """Validate a /retrieve body; returns (queries, topk, return_scores) or raises RequestError."""
    if len(raw) > limits.max_body_bytes:
        raise RequestError(f"body larger than {limits.max_body_bytes} bytes", status=413)
    try:
        body = loads_json(raw)
    except BodyError as err:
        raise RequestError(str(err), status=err.status) from None
    if not isinstance(body, dict):
        raise RequestError("body must be a JSON object with 'queries'")
    unknown = sorted(set(body) - {"queries", "topk", "return_scores"})
    if unknown:
        raise RequestError(f"unknown field(s): {', '.join(unknown)}")
    queries = body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("'queries' is required and must be a list of strings")
    if len(queries) > limits.max_queries:
        raise RequestError(f"too many queries: {len(queries)} > {limits.max_queries}")
    longest = max((len(q) for q in queries), default=0)
    if longest > limits.max_query_chars:
        raise RequestError(f"a query has {longest} characters (max {limits.max_query_chars})")
    topk = body.get("topk")
    if topk is None:
        topk = limits.default_topk
    if not _is_int(topk) or not 1 <= topk <= limits.max_topk:
        raise RequestError(f"'topk' must be an integer in [1, {limits.max_topk}], got {topk!r}")
    return_scores = body.get("return_scores", False)
    if not isinstance(return_scores, bool):
        raise RequestError(f"'return_scores' must be true or false, got {return_scores!r}")
    return queries, topk, return_scores


@dataclass
class _Batch:
    queries: list[str] = field(default_factory=list)
    waiters: list[tuple[asyncio.Future, int, int]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class MicroBatcher:
    """Merges requests with the same topk that arrive within `max_wait_s` into one retrieve call.

    One call over 8 queries costs far less than 8 calls over one (a single model forward, a
    single FAISS search), and on a few CPU cores parallel calls mostly fight for the same cores.
    A batch is flushed when it reaches `max_batch` queries or its timer fires.
    """

    def __init__(self, retriever: Retriever, max_wait_s: float, max_batch: int = 256) -> None:
        self.retriever = retriever
        self.max_wait_s = max_wait_s
        self.max_batch = max_batch
        self._pending: dict[int, _Batch] = {}
        self._tasks: set[asyncio.Task] = set()  # strong refs: the loop keeps only weak ones

    async def submit(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        from starlette.concurrency import run_in_threadpool

        if not queries:
            return []
        if self.max_wait_s <= 0:
            return await run_in_threadpool(self.retriever.retrieve, queries, topk)
        loop = asyncio.get_running_loop()
        batch = self._pending.get(topk)
        if batch is None:
            batch = self._pending[topk] = _Batch()
            batch.timer = loop.call_later(self.max_wait_s, self._flush, topk, batch)
        future: asyncio.Future = loop.create_future()
        start = len(batch.queries)
        batch.queries.extend(queries)
        batch.waiters.append((future, start, len(batch.queries)))
        if len(batch.queries) >= self.max_batch:
            self._flush(topk, batch)
        return await future

    def _flush(self, topk: int, batch: _Batch) -> None:
        if self._pending.get(topk) is not batch:
            return  # already flushed by size
        del self._pending[topk]
        if batch.timer is not None:
            batch.timer.cancel()
        task = asyncio.ensure_future(self._run(topk, batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, topk: int, batch: _Batch) -> None:
        from starlette.concurrency import run_in_threadpool

        try:
            results = await run_in_threadpool(self.retriever.retrieve, batch.queries, topk)
        except Exception as exc:  # every waiter gets the failure; the server stays up
            for future, _, _ in batch.waiters:
                if not future.done():
                    future.set_exception(exc)
            return
        for future, start, end in batch.waiters:
            if not future.done():  # a client that went away cancelled its future
                future.set_result(results[start:end])


def create_app(
    retriever: Retriever,
    limits: Limits | None = None,
    batch_wait_ms: float = 0.0,
    info: dict[str, Any] | None = None,
    token: str | None = None,
) -> Any:
    """The FastAPI app serving `retriever` (see the module docstring for the API); with a
    `token`, every route but /health needs `Authorization: Bearer <token>`."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    limits = limits or Limits()
    batcher = MicroBatcher(retriever, batch_wait_ms / 1000.0)
    details = dict(info if info is not None else getattr(retriever, "info", {}))
    app = FastAPI(title="agentic-rl retriever", description="Search-R1 compatible /retrieve API")
    guard = Guard(limits.max_body_bytes, token, limits.max_inflight).install(app)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            **details,
            "default_topk": limits.default_topk,
            "inflight": guard.inflight,
            "refused": dict(guard.refused),
        }

    @app.post("/retrieve", openapi_extra=retrieve_openapi(limits))
    async def retrieve(request: Request) -> Any:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_body_bytes:  # before reading it
            return JSONResponse(
                {"detail": f"body larger than {limits.max_body_bytes} bytes"}, status_code=413
            )
        try:
            queries, topk, return_scores = parse_retrieve_request(await request.body(), limits)
        except RequestError as err:
            return JSONResponse({"detail": str(err)}, status_code=err.status)
        try:
            results = await batcher.submit(queries, topk)
        except Exception as exc:
            return JSONResponse(
                {"detail": f"retrieval failed: {type(exc).__name__}: {exc}"}, status_code=500
            )
        if not return_scores:  # Search-R1 returns bare documents then
            results = [[item["document"] for item in row] for row in results]
        return {"result": results}

    return app


def retrieve_openapi(limits: Limits) -> dict[str, Any]:
    """The /retrieve request body as OpenAPI (the handler reads the raw body itself, so FastAPI
    cannot infer it): documents the API and lets schemathesis fuzz it."""
    schema = {
        "type": "object",
        "required": ["queries"],
        "additionalProperties": False,
        "properties": {
            "queries": {
                "type": "array",
                "maxItems": limits.max_queries,
                "items": {"type": "string", "maxLength": limits.max_query_chars},
            },
            "topk": {"type": ["integer", "null"], "minimum": 1, "maximum": limits.max_topk},
            "return_scores": {"type": "boolean"},
        },
    }
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def bind_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening-ready TCP socket; port 0 picks a free port with no race (the socket holds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class BackgroundServer:
    """Run an ASGI app with uvicorn in a daemon thread (tests, benchmarks, notebooks).

    Use as a context manager: the server is accepting connections on entry and shut down on
    exit. `url` is e.g. "http://127.0.0.1:54321".
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 10.0) -> "BackgroundServer":
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.thread.is_alive():
            if self.server.started:
                return self
            time.sleep(0.01)
        raise RuntimeError(f"uvicorn did not start on {self.url} within {timeout_s} s")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    index_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    default_topk: int = DEFAULT_TOPK,
    rerank: int = 0,
    batch_wait_ms: float = 2.0,
    log_level: str = "info",
    token: str | None = None,
    max_inflight: int = MAX_INFLIGHT,
) -> None:
    """Load an index directory and serve it until interrupted (blocks). `token` (default
    $AGENTIC_RL_API_TOKEN) is required when `host` is not a loopback address."""
    import uvicorn

    from agentic_rl.retrieval.index import load_index

    token = require_token(host, token, "serve-retriever")  # before the slow index load
    retriever = load_index(index_dir, rerank=rerank)
    retriever.warmup()  # load the embedding model before the first request, not during it
    limits = Limits(default_topk=default_topk, max_inflight=max_inflight)
    app = create_app(retriever, limits, batch_wait_ms=batch_wait_ms, token=token)
    print(f"serving {index_dir} ({retriever.info}) on http://{host}:{port}/retrieve", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)

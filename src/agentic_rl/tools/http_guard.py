"""Edge protection shared by the three HTTP servers (retrieval, sandbox, serve-policy).

Each server exposes something a stranger must not drive: the sandbox's `/run` executes code, the
policy server's reward endpoint triggers training, and any of them can be made to allocate
without bound. `GuardMiddleware` (an ASGI middleware, no framework import) puts the same rules
in front of every route:

- **Bearer token.** With a token set, every request but /health and the API docs needs
  `Authorization: Bearer <token>` (401 otherwise). `require_token` refuses to start a server
  bound to a non-loopback address without one: on a shared network an open `/run` is remote
  code execution.
- **Body size before reading.** A declared `Content-Length` over the limit is refused (413)
  without reading a byte; a chunked body (no length) is read up to the limit and refused as soon
  as it passes it, so a client cannot stream gigabytes into memory.
- **Bounded in-flight work.** At most `max_inflight` requests are inside the app at once; the
  next one gets 503 with `Retry-After` at once instead of joining a queue that grows without
  bound (every queue behind the edge, a micro-batcher or a worker pool, is thereby bounded too).

`loads_json` is the JSON parser for request bodies: it answers 400 for a body nested deeper than
`MAX_JSON_DEPTH` (deep nesting raises RecursionError inside `json.loads`, or later in code that
walks the value) instead of letting the error escape as a 500.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

TOKEN_ENV = "AGENTIC_RL_API_TOKEN"
"""Environment variable the servers (and the retrieval / sandbox clients) read the token from
when none is passed explicitly; serve-policy's OpenAI clients send it as their `api_key`."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays/objects a request body may have (real requests use about 6)."""
DEFAULT_MAX_INFLIGHT = 64
OPEN_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/redoc"})
"""Paths answered without a token: liveness probes and the API description carry no secret."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyError(ValueError):
    """A request body the server refuses; `status` is the HTTP code (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, "localhost")."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a hostname: it may resolve to anything


def resolve_token(token: str | None) -> str | None:
    """The token to use: the explicit one, else $AGENTIC_RL_API_TOKEN, else None."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return token or None


def require_token(host: str, token: str | None, what: str) -> str | None:
    """The server's token (`resolve_token`); raises ValueError when `host` is not loopback and
    there is none, with a message that says how to set one."""
    token = resolve_token(token)
    if token is None and not is_loopback(host):
        raise ValueError(
            f"{what} bound to {host}, which other machines can reach, needs an access token: "
            f"pass --auth-token TOKEN or set {TOKEN_ENV}=TOKEN (clients send it as "
            "'Authorization: Bearer TOKEN'), or bind to 127.0.0.1"
        )
    return token


def bearer_ok(header: str | None, token: str | None) -> bool:
    """Whether an Authorization header carries `token` (always true without a token)."""
    if token is None:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


def json_depth_ok(value: Any, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests arrays/objects at most `max_depth` deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def loads_json(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse a request body; BodyError (400) for invalid JSON or nesting over `max_depth`."""
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise BodyError("body is not valid JSON") from None
    except RecursionError:
        raise BodyError(f"body is nested more than {max_depth} levels deep") from None
    if not json_depth_ok(value, max_depth):
        raise BodyError(f"body is nested more than {max_depth} levels deep")
    return value


async def _reply(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail, "error": {"message": detail, "code": status}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass
class Guard:
    """The rules and live counters of one server's `GuardMiddleware` (see the module docstring).

    `max_body_bytes` bounds every request body (the app may apply a smaller limit of its own);
    `max_inflight` 0 means unbounded; `refused` counts refusals by reason for /health and tests.
    """

    max_body_bytes: int
    token: str | None = None
    max_inflight: int = DEFAULT_MAX_INFLIGHT
    inflight: int = 0
    refused: dict[str, int] = field(
        default_factory=lambda: {"unauthorized": 0, "too_large": 0, "busy": 0}
    )

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.max_inflight < 0:
            raise ValueError("max_body_bytes must be >= 1 and max_inflight >= 0")
        self.token = self.token or None

    def install(self, app: Any) -> Guard:
        """Put this guard in front of a Starlette/FastAPI app; returns self."""
        app.add_middleware(GuardMiddleware, guard=self)
        return self


class GuardMiddleware:
    """ASGI middleware applying a `Guard`: token, body size and in-flight limits."""

    def __init__(self, app: Any, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        g = self.guard
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["path"] not in OPEN_PATHS and not bearer_ok(headers.get("authorization"), g.token):
            g.refused["unauthorized"] += 1
            await _reply(
                send,
                401,
                "missing or wrong access token: send 'Authorization: Bearer TOKEN'",
                [(b"www-authenticate", b"Bearer")],
            )
            return
        if g.max_inflight and g.inflight >= g.max_inflight:
            g.refused["busy"] += 1
            await _reply(
                send,
                503,
                f"server busy: {g.inflight} requests in flight (max {g.max_inflight}); "
                "retry shortly",
                [(b"retry-after", b"1")],
            )
            return
        g.inflight += 1
        try:
            await self._serve(scope, receive, send, headers)
        finally:
            g.inflight -= 1

    async def _serve(self, scope: Scope, receive: Receive, send: Send, headers: dict) -> None:
        g, limit = self.guard, self.guard.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            g.refused["too_large"] += 1
            await _reply(send, 413, f"body larger than {limit} bytes")
            return
        # Read the whole body here, counting as it arrives (chunked bodies have no length).
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                g.refused["too_large"] += 1
                await _reply(send, 413, f"body larger than {limit} bytes")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the app waits for a disconnect

        await self.app(scope, replay, send)


def add_guard_arguments(parser: Any, default_inflight: int | None) -> None:
    """`--auth-token` and `--max-inflight` for a server command (argparse parser)."""
    parser.add_argument(
        "--auth-token",
        default=None,
        help=f"bearer token every request but /health must carry (default: ${TOKEN_ENV}); "
        "required when --host is not a loopback address",
    )
    parser.add_argument(
        "--max-inflight",
        type=int,
        default=default_inflight,
        help="requests in flight at once; more are answered 503 at once (0: unbounded)",
    )

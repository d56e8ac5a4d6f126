"""Client for a Search-R1 compatible retrieval server, and the `search` tool built on it.

`RetrieverClient` posts to `/retrieve` with retries (connection errors and 5xx, exponential
backoff) and a per-request timeout. `SearchClientTool` is the agent-facing tool: Search-R1 text
formatting (tools/search.py), and a record/replay cache so a training run can be repeated
without the server (DeepResearcher trains against a cached web the same way). A request the
server rejects (4xx: e.g. a query over the length limit) is a `RetrievalError` (a ToolError)
with a message written for the agent, which the env's `call_tool` turns into an observation. A
server that cannot answer (unreachable, 5xx or timeouts after the retries, a malformed reply,
a refused token) is `RetrievalUnavailable`, a `ToolInfrastructureError`: not the model's doing,
so the episode is retried or dropped, never trained on (train/collect.py). The token of a
guarded server (tools/http_guard.py) comes from `token` or $AGENTIC_RL_API_TOKEN.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentic_rl.tools.base import ToolError, ToolInfrastructureError
from agentic_rl.tools.http_guard import resolve_token
from agentic_rl.tools.search import SEARCH_DESCRIPTION, answer_search, search_parameters

CacheMode = Literal["off", "record", "replay"]
CACHE_MODES = ("off", "record", "replay")
Results = list[list[dict[str, Any]]]


class RetrievalError(ToolError):
    """The retrieval server refused the request (4xx), or a replay cache has no answer."""


class RetrievalUnavailable(RetrievalError, ToolInfrastructureError):
    """The retrieval server could not answer: unreachable, 5xx or slow after the retries, a
    malformed reply, or access refused (401/403/404/429). Infrastructure, not the model."""


# Answers that say the server (or its configuration) is at fault, not the request.
_INFRA_STATUS = {401, 403, 404, 408, 429}


def _endpoint(url: str) -> str:
    # Accept both the server root and the full endpoint, as Search-R1 configs use the latter.
    url = url.rstrip("/")
    return url if url.endswith("/retrieve") else url + "/retrieve"


def _detail(response: Any) -> str:
    try:
        detail = response.json().get("detail", "")
    except (ValueError, AttributeError):
        detail = response.text
    return str(detail)[:200]


@dataclass
class RetrieverClient:
    """Blocking, thread-safe client for `POST /retrieve`.

    `retries` extra attempts follow a connection error or a 5xx, after `backoff_s`, doubled each
    time. A read timeout is not retried unless `retry_on_timeout` (a slow server usually stays
    slow; keep timeout_s x attempts below the env's tool timeout). 4xx answers are not retried:
    the request itself is wrong.
    """

    url: str
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.2
    retry_on_timeout: bool = False
    token: str | None = None
    _http: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        import httpx  # lazy: only users of a remote retriever need it

        if self.timeout_s <= 0 or self.retries < 0 or self.backoff_s < 0:
            raise ValueError("timeout_s must be > 0, retries and backoff_s >= 0")
        self.endpoint = _endpoint(self.url)
        token = resolve_token(self.token)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=self.timeout_s, headers=headers)

    def _attempt(self, payload: dict[str, Any]) -> tuple[Any, str | None]:
        """One POST: (parsed JSON, None) on success, or (None, retryable error text); raises
        RetrievalError for errors not worth retrying."""
        import httpx

        try:
            response = self._http.post(self.endpoint, json=payload)
        except httpx.ConnectTimeout as exc:
            return None, f"could not connect ({type(exc).__name__})"
        except httpx.TimeoutException:
            message = f"no answer within {self.timeout_s:g} s"
            if self.retry_on_timeout:
                return None, message
            raise RetrievalUnavailable(
                f"search server at {self.endpoint} timed out: {message}"
            ) from None
        except httpx.TransportError as exc:
            return None, f"could not connect ({type(exc).__name__}: {exc})"
        if response.status_code >= 500 or response.status_code == 429:
            return None, f"server error {response.status_code}: {_detail(response)}"
        if response.status_code in _INFRA_STATUS:
            raise RetrievalUnavailable(
                f"search server at {self.endpoint} refused access ({response.status_code}): "
                f"{_detail(response)}"
            )
        if response.status_code >= 400:
            raise RetrievalError(
                f"search request rejected ({response.status_code}): {_detail(response)}"
            )
        try:
            return response.json(), None
        except ValueError:
            raise RetrievalUnavailable("search server sent a reply that is not JSON") from None

    def retrieve(self, queries: list[str], topk: int = 3, return_scores: bool = True) -> Results:
        """Results per query, exactly as the server sends them."""
        payload = {"queries": list(queries), "topk": topk, "return_scores": return_scores}
        error = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            body, error = self._attempt(payload)
            if error is None:
                return _check_reply(body, len(queries), return_scores)
        raise RetrievalUnavailable(
            f"search server at {self.endpoint} unavailable after {self.retries + 1} attempt(s): "
            f"{error}"
        )

    def health(self) -> dict[str, Any]:
        """The server's /health JSON (raises RetrievalError when unreachable)."""
        import httpx

        url = self.endpoint[: -len("/retrieve")] + "/health"
        try:
            response = self._http.get(url)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise RetrievalUnavailable(
                f"health check of {url} failed: {type(exc).__name__}"
            ) from None

    def close(self) -> None:
        self._http.close()


def _check_reply(body: Any, num_queries: int, return_scores: bool) -> Results:
    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list) or len(result) != num_queries:
        raise RetrievalUnavailable(
            "search server reply has no 'result' list with one entry per query"
        )
    for row in result:
        for item in row if isinstance(row, list) else [None]:
            doc = item.get("document") if return_scores and isinstance(item, dict) else item
            if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
                raise RetrievalUnavailable("search server reply has a malformed document")
    return result


class QueryCache:
    """JSONL cache of retrieval results keyed by (query, topk), one `{"query", "topk",
    "result"}` object per line; appends are flushed at once so a crash loses nothing.

    The key does not include the index: use one cache file per index.
    """

    def __init__(self, path: str | Path, mode: CacheMode) -> None:
        if mode not in ("record", "replay"):
            raise ValueError(f"cache mode must be 'record' or 'replay', got {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int], list[dict[str, Any]]] = {}
        if mode == "replay" and not self.path.is_file():
            raise FileNotFoundError(f"replay cache {self.path} not found; record it first")
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        with self.path.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self._entries[(row["query"], int(row["topk"]))] = row["result"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{self.path}:{lineno}: bad cache line ({exc})") from None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, query: str, topk: int) -> list[dict[str, Any]] | None:
        return self._entries.get((query, topk))

    def put(self, query: str, topk: int, result: list[dict[str, Any]]) -> None:
        line = json.dumps({"query": query, "topk": topk, "result": result}, ensure_ascii=False)
        with self._lock:
            if (query, topk) in self._entries:
                return
            self._entries[(query, topk)] = result
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")


@dataclass
class SearchClientTool:
    """Tool "search" backed by a retrieval server; output formatted as Search-R1 does.

    cache_mode "record": answer from `cache_path` when the (query, topk) is there, else ask the
    server and store the answer; "replay": answer only from the cache, a miss is an error (no
    server needed, `url` may be None); "off": always ask the server.
    """

    url: str | None
    topk: int = 3
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = 0.2
    cache_path: str | Path | None = None
    cache_mode: CacheMode = "off"
    token: str | None = None
    name: str = "search"
    description: str = SEARCH_DESCRIPTION
    parameters: dict[str, Any] = field(default_factory=search_parameters)
    result_tag: str = "information"
    client: RetrieverClient | None = field(default=None, init=False, repr=False)
    cache: QueryCache | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.cache_mode not in CACHE_MODES:
            raise ValueError(f"cache_mode must be one of {CACHE_MODES}, got {self.cache_mode!r}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        if self.cache_mode != "off":
            if self.cache_path is None:
                raise ValueError(f"cache_mode {self.cache_mode!r} needs a cache_path")
            self.cache = QueryCache(self.cache_path, self.cache_mode)
        if self.cache_mode != "replay":
            if not self.url:
                raise ValueError("a server url is needed unless cache_mode is 'replay'")
            self.client = RetrieverClient(
                self.url, self.timeout_s, self.retries, self.backoff_s, token=self.token
            )

    def retrieve(self, queries: list[str], topk: int | None = None) -> Results:
        """Scored results per query; cache hits are served locally, misses in one request."""
        k = topk or self.topk
        results: list[list[dict[str, Any]] | None] = [
            self.cache.get(q, k) if self.cache is not None else None for q in queries
        ]
        missing = [q for q, r in zip(queries, results, strict=True) if r is None]
        if missing and self.cache_mode == "replay":
            raise RetrievalError(
                f"no cached result for query {missing[0]!r} (topk={k}) in replay cache "
                f"{self.cache_path}; record it first with cache_mode='record'"
            )
        if missing:
            assert self.client is not None
            unique = list(dict.fromkeys(missing))  # a repeated query is fetched once
            answers = dict(zip(unique, self.client.retrieve(unique, k), strict=True))
            for query, answer in answers.items():
                if self.cache is not None:
                    self.cache.put(query, k, answer)
            results = [
                answers[q] if r is None else r for q, r in zip(queries, results, strict=True)
            ]
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Close the HTTP connection pool."""
        if self.client is not None:
            self.client.close()

    def __call__(self, query: str) -> str:
        return answer_search(self.retrieve, query)

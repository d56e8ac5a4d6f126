"""Web tools for DeepResearcher / ASearcher: `web_search` and `browse_webpage`.

Both tools sit behind a `WebProvider` (`search(query, k) -> [{"title", "url", "snippet"}]`,
`fetch(url) -> html or text`):

- `LocalFakeProvider`: an in-memory web (pages you give it, or Search-R1 corpus documents served
  as pages); what every test and CPU recipe uses. It never touches the network.
- `HttpSearchProvider`: a generic HTTP JSON search API (endpoint, API key from an environment
  variable, a dotted path to the results list) plus plain HTTP page fetches. It is OFF by
  default: it refuses to be built unless `enabled=True` or AGENTIC_RL_ENABLE_WEB=1. It fetches
  only pages its own searches returned or hosts in `allowed_hosts` (never an arbitrary URL the
  model writes), never a loopback, private or link-local address (redirects included), and
  stops reading a reply at a size limit.
- `CachedWebProvider`: record/replay JSONL cache in front of any provider (DeepResearcher trains
  against a cached web the same way; retrieval/client.py does this for the retriever), so a run
  can be repeated offline.

`browse_webpage` passes pages through a `PageReader` (tools/page_reader.py) that keeps the parts
relevant to the question within a character budget. Failures are `WebError`s (ToolErrors): the
agent sees a message, the run goes on.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urljoin, urlsplit

from agentic_rl.tools.base import ToolError, ToolInfrastructureError
from agentic_rl.tools.page_reader import PageReader, html_title, html_to_text, looks_like_html

SearchHit = dict[str, str]
ENABLE_ENV = "AGENTIC_RL_ENABLE_WEB"
_WORD = re.compile(r"\w+")


class WebError(ToolError):
    """A web search or fetch failed; the message is shown to the agent."""


class WebSearchUnavailable(WebError, ToolInfrastructureError):
    """The search provider could not answer (unreachable, timing out, a malformed reply): an
    infrastructure failure, never shown to the agent (the episode is replayed or dropped). A
    page the model asked for that cannot be fetched stays a WebError: the model chose it."""


class WebDisabledError(RuntimeError):
    """A real web provider was requested while web access is off."""


@runtime_checkable
class WebProvider(Protocol):
    def search(self, query: str, k: int) -> list[SearchHit]: ...

    def fetch(self, url: str) -> str: ...


@dataclass
class LocalFakeProvider:
    """An in-memory web: `pages` maps url -> html or text. Search scores pages by TF-IDF of the
    query terms over title + text (ties by url order); `calls` counts requests for tests."""

    pages: dict[str, str]
    snippet_chars: int = 200
    calls: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._docs: dict[str, tuple[str, str]] = {}
        for url, page in self.pages.items():
            text = html_to_text(page) if looks_like_html(page) else page.strip()
            title = html_title(page) or (text.splitlines()[0][:80] if text else url)
            self._docs[url] = (title, text)
        self._terms = {
            url: Counter(_WORD.findall(f"{title}\n{text}".lower()))
            for url, (title, text) in self._docs.items()
        }

    @classmethod
    def from_corpus(
        cls, corpus: Sequence[Mapping[str, str]], base_url: str = "https://local.test/doc/"
    ) -> LocalFakeProvider:
        """Serve Search-R1 documents (`{"id", "contents"}`) as HTML pages at base_url + id."""
        pages = {}
        for doc in corpus:
            title, _, text = doc["contents"].partition("\n")
            title = escape(title.strip().strip('"'))
            pages[f"{base_url}{doc['id']}"] = (
                f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
                f"<p>{escape(text)}</p></body></html>"
            )
        return cls(pages)

    def search(self, query: str, k: int) -> list[SearchHit]:
        self.calls["search"] += 1
        terms = set(_WORD.findall(query.lower()))
        n = len(self._terms)
        scored = []
        for order, (url, counts) in enumerate(self._terms.items()):
            score = 0.0
            for term in terms:
                if counts[term]:
                    df = sum(1 for c in self._terms.values() if c[term])
                    score += (1 + math.log(counts[term])) * math.log(1 + n / df)
            if score > 0:
                scored.append((-score, order, url))
        hits = []
        for _, _, url in sorted(scored)[:k]:
            title, text = self._docs[url]
            hits.append({"title": title, "url": url, "snippet": text[: self.snippet_chars]})
        return hits

    def fetch(self, url: str) -> str:
        self.calls["fetch"] += 1
        if url not in self.pages:
            raise WebError(f"page not found: {url}")
        return self.pages[url]


def _dig(payload: Any, path: str) -> Any:
    for key in filter(None, path.split(".")):
        payload = payload.get(key) if isinstance(payload, Mapping) else None
    return payload


def _host_matches(host: str, pattern: str) -> bool:
    """ "example.org" matches example.org and its subdomains; "*" matches every host."""
    pattern = pattern.lower().strip(".")
    return pattern == "*" or host == pattern or host.endswith("." + pattern)


def _public_ip(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


@dataclass
class HttpSearchProvider:
    """A generic HTTP JSON search API (GET endpoint?q=...&count=k) and HTTP page fetches.

    OFF by default: construction raises WebDisabledError unless `enabled=True` or the environment
    has AGENTIC_RL_ENABLE_WEB=1. The API key is read from the `api_key_env` variable at request
    time and sent as `api_key_header: api_key_prefix + key`. Results are the list at the dotted
    `results_path` of the reply; each item's title/url/snippet come from the `*_key` fields.

    `fetch` opens only URLs this provider's searches returned (`fetch_search_results`) or on a
    host of `allowed_hosts` ("example.org" also allows its subdomains; "*" any public host):
    a URL the model makes up is refused. Whatever the lists say, hosts that are or resolve to
    loopback, private, link-local or other non-public addresses are refused, at every redirect
    (followed by hand, at most `max_redirects`). Replies are read as a stream and cut at
    `max_page_bytes` (a declared larger Content-Length is refused before reading), within
    `timeout_s` in all. `transport` is an optional httpx transport (tests pass
    httpx.MockTransport); with one, the address check covers IP literals and "localhost" only,
    as no DNS is involved."""

    endpoint: str
    api_key_env: str = "AGENTIC_RL_WEB_API_KEY"
    enabled: bool = False
    results_path: str = "results"
    query_param: str = "q"
    count_param: str = "count"
    title_key: str = "title"
    url_key: str = "url"
    snippet_key: str = "snippet"
    api_key_header: str = "Authorization"
    api_key_prefix: str = "Bearer "
    timeout_s: float = 10.0
    max_page_chars: int = 1_000_000
    max_page_bytes: int = 4_000_000
    max_redirects: int = 5
    allowed_hosts: tuple[str, ...] = ()
    fetch_search_results: bool = True
    transport: Any = None
    _http: Any = field(default=None, init=False, repr=False)
    _seen: set = field(default_factory=set, init=False, repr=False)
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if not (self.enabled or os.environ.get(ENABLE_ENV) == "1"):
            raise WebDisabledError(
                "real web access is off: pass enabled=True (or set AGENTIC_RL_ENABLE_WEB=1) to "
                "let HttpSearchProvider make network requests"
            )
        import httpx  # lazy: only real web users need it

        self._http = httpx.Client(
            timeout=self.timeout_s, follow_redirects=False, transport=self.transport
        )

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env, "")
        if not key:
            raise WebError(f"web search is not configured: set {self.api_key_env}")
        return {self.api_key_header: self.api_key_prefix + key}

    def _check_address(self, host: str) -> None:
        """Refuse hosts that are, or resolve to, non-public addresses."""
        try:
            literal = [str(ipaddress.ip_address(host.strip("[]")))]
        except ValueError:
            literal = None
        if literal is None and (host == "localhost" or host.endswith(".localhost")):
            literal = ["127.0.0.1"]
        if literal is None and self.transport is not None:
            return  # no DNS behind a custom transport
        try:
            addresses = literal or [
                info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            ]
        except (OSError, UnicodeError):
            raise WebError(f"could not resolve {host}") from None
        if not addresses or not all(_public_ip(a) for a in addresses):
            raise WebError(f"{host} is not a public address; fetching it is not allowed")

    def _check_url(self, url: str, origin_host: str | None = None) -> None:
        """May `url` be fetched? (origin_host: the host of a permitted URL redirecting here)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebError(f"not an http(s) url: {url}")
        host = parts.hostname.lower().rstrip(".")
        with self._lock:
            from_search = self.fetch_search_results and url in self._seen
        listed = any(_host_matches(host, pattern) for pattern in self.allowed_hosts)
        if not (from_search or listed or host == origin_host):
            raise WebError(
                f"{url} is not allowed: only pages that web_search returned, or hosts the "
                "provider allows (allowed_hosts), can be opened"
            )
        self._check_address(host)

    def _get(self, url: str, params: Any = None, headers: Any = None, check: bool = True) -> Any:
        """(final response, body bytes) for a GET: redirects followed by hand, each checked;
        the body streamed and cut at max_page_bytes, within timeout_s."""
        deadline = time.monotonic() + self.timeout_s
        origin = None
        for _ in range(self.max_redirects + 1):
            if check:
                self._check_url(url, origin)
            with self._http.stream("GET", url, params=params, headers=headers) as response:
                if response.is_redirect and "location" in response.headers:
                    origin = urlsplit(url).hostname
                    url, params = urljoin(str(response.url), response.headers["location"]), None
                    continue
                response.raise_for_status()
                declared = int(response.headers.get("content-length") or 0)
                if declared > self.max_page_bytes:
                    raise WebError(f"{url} is too large ({declared:,} bytes)")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) >= self.max_page_bytes or time.monotonic() > deadline:
                        break
                return response, bytes(body[: self.max_page_bytes])
        raise WebError(f"too many redirects from {url}")

    def search(self, query: str, k: int) -> list[SearchHit]:
        import httpx

        params = {self.query_param: query, self.count_param: k}
        try:
            _, body = self._get(self.endpoint, params, self._headers(), check=False)
            items = _dig(json.loads(body), self.results_path)
        except (httpx.HTTPError, ValueError) as exc:
            raise WebSearchUnavailable(f"web search failed ({type(exc).__name__})") from None
        if not isinstance(items, list):
            raise WebSearchUnavailable(f"web search reply has no list at '{self.results_path}'")
        hits = []
        for item in items[:k]:
            if isinstance(item, Mapping) and item.get(self.url_key):
                hits.append(
                    {
                        "title": str(item.get(self.title_key, "")),
                        "url": str(item[self.url_key]),
                        "snippet": str(item.get(self.snippet_key, "")),
                    }
                )
        self.allow_urls(hit["url"] for hit in hits)
        return hits

    def allow_urls(self, urls: Iterable[str]) -> None:
        """Let `fetch` open these URLs (search results; CachedWebProvider replays call this)."""
        with self._lock:
            self._seen.update(urls)

    def fetch(self, url: str) -> str:
        import httpx

        try:
            response, body = self._get(url)
        except httpx.HTTPError as exc:
            raise WebError(f"could not fetch {url} ({type(exc).__name__})") from None
        kind = response.headers.get("content-type", "text/html")
        if not kind.startswith(("text/", "application/xhtml")):
            raise WebError(f"{url} is not a text page ({kind})")
        text = body.decode(response.charset_encoding or "utf-8", errors="replace")
        return text[: self.max_page_chars]

    def close(self) -> None:
        self._http.close()


CacheMode = Literal["record", "replay"]


class CachedWebProvider:
    """Record/replay JSONL cache of searches and fetches in front of `provider`.

    One line per answer: `{"kind": "search", "query", "k", "result": [hits]}` or
    `{"kind": "fetch", "url", "result": text}`, appended and flushed at once. "record": answer
    from the cache, else ask the provider and store; "replay": cache only (no provider needed),
    a miss is a WebError. Failed requests are not cached."""

    def __init__(
        self, provider: WebProvider | None, path: str | Path, mode: CacheMode = "record"
    ) -> None:
        if mode not in ("record", "replay"):
            raise ValueError(f"cache mode must be 'record' or 'replay', got {mode!r}")
        if mode == "record" and provider is None:
            raise ValueError("record mode needs a provider")
        self.provider, self.path, self.mode = provider, Path(path), mode
        self._lock = threading.Lock()
        self._entries: dict[tuple, Any] = {}
        if mode == "replay" and not self.path.is_file():
            raise FileNotFoundError(f"replay cache {self.path} not found; record it first")
        if self.path.is_file():
            for lineno, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    self._entries[self._key(row)] = row["result"]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ValueError(f"{self.path}:{lineno}: bad cache line ({exc})") from None

    @staticmethod
    def _key(row: Mapping[str, Any]) -> tuple:
        if row["kind"] == "search":
            return ("search", row["query"], int(row["k"]))
        return ("fetch", row["url"])

    def __len__(self) -> int:
        return len(self._entries)

    def _get(self, row: dict[str, Any], ask: Any) -> Any:
        key = self._key(row)
        if key in self._entries:
            return self._entries[key]
        if self.mode == "replay":
            raise WebError(f"no cached {key[0]} for {key[1]!r} in replay cache {self.path}")
        result = ask()
        with self._lock:
            if key not in self._entries:
                self._entries[key] = result
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with self.path.open("a", encoding="utf-8") as handle:
                    line = json.dumps({**row, "result": result}, ensure_ascii=False)
                    handle.write(line + "\n")
        return result

    def search(self, query: str, k: int) -> list[SearchHit]:
        provider = self.provider
        row = {"kind": "search", "query": query, "k": k}
        hits = self._get(row, lambda: provider.search(query, k))  # type: ignore[union-attr]
        allow = getattr(provider, "allow_urls", None)
        if allow is not None:  # a cached search still lets the provider open its results
            allow(hit["url"] for hit in hits if isinstance(hit, Mapping) and "url" in hit)
        return hits

    def fetch(self, url: str) -> str:
        provider = self.provider
        row = {"kind": "fetch", "url": url}
        return self._get(row, lambda: provider.fetch(url))  # type: ignore[union-attr]


def format_hits(hits: Sequence[SearchHit]) -> str:
    """Search hits as numbered entries: title, URL, snippet."""
    return "\n".join(
        f"{i}. {hit['title']}\nURL: {hit['url']}\n{hit['snippet']}".rstrip()
        for i, hit in enumerate(hits, start=1)
    )


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


@dataclass
class WebSearchTool:
    """Tool "web_search": the top `k` hits for a query (title, URL, snippet)."""

    provider: WebProvider
    k: int = 5
    name: str = "web_search"
    description: str = "Search the web; returns titles, URLs and snippets of the top pages."
    parameters: dict[str, Any] = field(
        default_factory=lambda: _schema({"query": {"type": "string"}}, ["query"])
    )
    result_tag: str = "information"

    def __call__(self, query: str) -> str:
        if not isinstance(query, str) or not query.strip():
            raise ToolError("empty search query; write the words to search for")
        hits = self.provider.search(query.strip(), self.k)
        return format_hits(hits) if hits else f"No results found for '{query.strip()}'."


@dataclass
class BrowseWebpageTool:
    """Tool "browse_webpage": fetch a URL and return the parts relevant to the question (the
    `question` argument, else the task question set with `set_task`)."""

    provider: WebProvider
    reader: PageReader = field(default_factory=PageReader)
    question: str = ""
    name: str = "browse_webpage"
    description: str = "Open a web page by URL and read the parts relevant to the question."
    parameters: dict[str, Any] = field(
        default_factory=lambda: _schema(
            {"url": {"type": "string"}, "question": {"type": "string"}}, ["url"]
        )
    )
    result_tag: str = "information"

    def set_task(self, question: str, answers: Sequence[str] = ()) -> None:
        """Read pages for this question from now on (answers are not used)."""
        self.question = question

    def __call__(self, url: str, question: str = "") -> str:
        if not isinstance(url, str) or not url.strip():
            raise ToolError("empty url; write the address of the page to open")
        page = self.provider.fetch(url.strip())
        text = self.reader.read(page, question or self.question)
        return f"Page: {url.strip()}\n{text}" if text else f"Page {url.strip()} has no text."


def make_web_tools(
    provider: WebProvider, reader: PageReader | None = None, k: int = 5
) -> list[WebSearchTool | BrowseWebpageTool]:
    """The DeepResearcher tool pair over one provider."""
    return [WebSearchTool(provider, k=k), BrowseWebpageTool(provider, reader or PageReader())]

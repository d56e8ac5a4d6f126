"""Web tools over the local fake provider; the real provider is off and only meets a mock."""

import json

import pytest

from agentic_rl.envs.base import ToolEnv
from agentic_rl.envs.search.multihop import build_multihop_corpus, build_multihop_world
from agentic_rl.formats.chat import TagFormat
from agentic_rl.tools.base import call_tool
from agentic_rl.tools.web import (
    ENABLE_ENV,
    BrowseWebpageTool,
    CachedWebProvider,
    HttpSearchProvider,
    LocalFakeProvider,
    WebDisabledError,
    WebError,
    WebProvider,
    WebSearchTool,
    format_hits,
    make_web_tools,
)
from agentic_rl.types import Task

httpx = pytest.importorskip("httpx")
BASE = "https://local.test/doc/"


@pytest.fixture(scope="module")
def provider():
    return LocalFakeProvider.from_corpus(build_multihop_corpus(50, 0))


def _city(world):
    return next(iter(world.cities.values()))


def test_fake_provider_search_and_fetch(provider):
    assert isinstance(provider, WebProvider)
    city = _city(build_multihop_world(50, 0))
    hits = provider.search(f"{city.name} river", 3)
    assert hits[0] == {
        "title": city.name,
        "url": f"{BASE}{city.doc_id}",
        "snippet": provider.search(city.name, 1)[0]["snippet"],
    }
    assert city.river in hits[0]["snippet"] and len(hits) == 3
    assert provider.search("zzzz unknownword", 3) == []
    assert "<title>" in provider.fetch(hits[0]["url"])
    with pytest.raises(WebError, match="page not found"):
        provider.fetch(f"{BASE}nope")


def test_tools_render_hits_and_read_pages(provider):
    city = _city(build_multihop_world(50, 0))
    search, browse = make_web_tools(provider, k=2)
    text = call_tool(search, {"query": f"{city.name} river"}, timeout_s=5).text
    assert text.startswith(f"1. {city.name}\nURL: {BASE}{city.doc_id}\n")
    assert "\n2. " in text
    page = call_tool(browse, {"url": f"{BASE}{city.doc_id}"}, timeout_s=5).text
    assert page.startswith(f"Page: {BASE}{city.doc_id}\n") and city.river in page
    missing = call_tool(browse, {"url": f"{BASE}nope"}, timeout_s=5)
    assert not missing.ok and "page not found" in missing.text
    assert not call_tool(search, {"query": " "}, timeout_s=5).ok
    assert call_tool(search, {"query": "zzzz"}, timeout_s=5).text == "No results found for 'zzzz'."
    assert format_hits([]) == ""
    odd = LocalFakeProvider.from_corpus([{"id": "1", "contents": '"A <b> & c"\nx < y and z > w'}])
    assert odd.search("x", 1)[0] == {
        "title": "A <b> & c",
        "url": f"{BASE}1",
        "snippet": "A <b> & c\nx < y and z > w",
    }


def test_browse_uses_the_question_to_condense_long_pages():
    filler = "".join(
        f"<p>Line {i} about the weather and nothing else at all.</p>" for i in range(80)
    )
    page = f"<html><body>{filler}<p>The founder was Ada Brimholt.</p>{filler}</body></html>"
    fake = LocalFakeProvider({"https://x.test/a": page})
    browse = BrowseWebpageTool(fake)
    browse.reader.max_chars = 300
    browse.set_task("Who was the founder?")
    out = browse(url="https://x.test/a")
    assert "Ada Brimholt" in out and len(out) < 400
    assert "Ada Brimholt" not in browse(url="https://x.test/a", question="weather report")


def test_tag_format_env_round_trip(provider):
    city = _city(build_multihop_world(50, 0))
    env = ToolEnv(make_web_tools(provider))
    fmt = TagFormat(env.tools)
    action = fmt.parse(f"<think>t</think><web_search>{city.name}</web_search>", "stop")
    assert (action.name, action.arguments) == ("web_search", {"query": city.name})
    env.reset(Task("t", "q?", ["x"]), 0)
    result = env.step(action)
    assert result.observation.name == "web_search" and city.name in result.observation.content
    browse = fmt.parse(f"<browse_webpage>{BASE}{city.doc_id}</browse_webpage>", "stop")
    assert browse.arguments == {"url": f"{BASE}{city.doc_id}"}
    assert city.river in env.step(browse).observation.content


def test_real_provider_is_off_by_default(monkeypatch):
    monkeypatch.delenv(ENABLE_ENV, raising=False)
    with pytest.raises(WebDisabledError, match="enabled=True"):
        HttpSearchProvider("https://search.invalid/api")


def _mock_transport(seen):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api":
            body = {"web": {"items": [
                {"name": "Hamfield", "link": "https://pages.invalid/h", "text": "On the Temkerk"},
                {"name": "no url"},
            ]}}  # fmt: skip
            return httpx.Response(200, json=body)
        if request.url.path == "/pdf":
            return httpx.Response(200, content=b"%PDF", headers={"content-type": "application/pdf"})
        if request.url.path == "/down":
            return httpx.Response(503)
        return httpx.Response(
            200, text="<p>Hamfield page</p>", headers={"content-type": "text/html"}
        )

    return httpx.MockTransport(handler)


def test_real_provider_parses_a_mocked_api(monkeypatch):
    seen = []
    monkeypatch.setenv("MY_KEY", "secret")
    real = HttpSearchProvider(
        "https://search.invalid/api",
        api_key_env="MY_KEY",
        enabled=True,
        results_path="web.items",
        title_key="name",
        url_key="link",
        snippet_key="text",
        allowed_hosts=("pages.invalid",),
        transport=_mock_transport(seen),
    )
    hits = real.search("Hamfield river", 5)
    assert hits == [
        {"title": "Hamfield", "url": "https://pages.invalid/h", "snippet": "On the Temkerk"}
    ]
    assert seen[0].headers["Authorization"] == "Bearer secret"
    assert seen[0].url.params["q"] == "Hamfield river" and seen[0].url.params["count"] == "5"
    assert real.fetch("https://pages.invalid/h") == "<p>Hamfield page</p>"
    with pytest.raises(WebError, match="not a text page"):
        real.fetch("https://pages.invalid/pdf")
    with pytest.raises(WebError, match="could not fetch"):
        real.fetch("https://pages.invalid/down")
    with pytest.raises(WebError, match="not an http"):
        real.fetch("file:///etc/passwd")
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(WebError, match="set MY_KEY"):
        real.search("q", 1)
    real.close()


def test_env_switch_enables_the_real_provider(monkeypatch):
    monkeypatch.setenv(ENABLE_ENV, "1")
    real = HttpSearchProvider("https://search.invalid/api", transport=_mock_transport([]))
    monkeypatch.setenv("AGENTIC_RL_WEB_API_KEY", "k")
    with pytest.raises(WebError, match="no list at 'results'"):
        real.search("q", 1)


def test_cache_record_then_replay(provider, tmp_path):
    path = tmp_path / "web.jsonl"
    fake = LocalFakeProvider.from_corpus(build_multihop_corpus(50, 0))
    cached = CachedWebProvider(fake, path, "record")
    first = cached.search("Hamfield river", 3)
    assert cached.search("Hamfield river", 3) == first and fake.calls["search"] == 1
    page = cached.fetch(first[0]["url"]) if first else cached.fetch(f"{BASE}0")
    with pytest.raises(WebError):
        cached.fetch(f"{BASE}nope")  # failures are not cached
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [row["kind"] for row in lines] == ["search", "fetch"]
    replay = CachedWebProvider(None, path, "replay")
    assert len(replay) == 2
    assert replay.search("Hamfield river", 3) == first and replay.fetch(lines[1]["url"]) == page
    with pytest.raises(WebError, match="no cached search"):
        replay.search("other", 3)
    tool = WebSearchTool(replay, k=3)
    assert not call_tool(tool, {"query": "other"}, timeout_s=5).ok
    with pytest.raises(FileNotFoundError, match="record it first"):
        CachedWebProvider(None, tmp_path / "none.jsonl", "replay")
    with pytest.raises(ValueError, match="needs a provider"):
        CachedWebProvider(None, tmp_path / "x.jsonl", "record")
    (tmp_path / "bad.jsonl").write_text('{"kind": "search"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: bad cache line"):
        CachedWebProvider(None, tmp_path / "bad.jsonl", "replay")


def _recording(seen, respond):
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return respond(request)

    return httpx.MockTransport(handler)


def _page(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/api":
        return httpx.Response(200, json={"results": [{"title": "T", "url": "https://a.invalid/p"}]})
    if request.url.path == "/to-metadata":
        return httpx.Response(302, headers={"location": "http://169.254.169.254/latest/"})
    if request.url.path == "/moved":
        return httpx.Response(301, headers={"location": "/p2"})
    return httpx.Response(200, text="page", headers={"content-type": "text/html"})


def test_fetch_opens_only_search_results_or_allowed_hosts(monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_WEB_API_KEY", "k")
    seen: list[str] = []
    web = HttpSearchProvider(
        "https://search.invalid/api", enabled=True, transport=_recording(seen, _page)
    )
    with pytest.raises(WebError, match="not allowed"):
        web.fetch("https://a.invalid/p")  # the model made it up: nothing was searched yet
    assert seen == []
    assert web.search("q", 3)[0]["url"] == "https://a.invalid/p"
    assert web.fetch("https://a.invalid/p") == "page"  # a search result may be opened
    with pytest.raises(WebError, match="not allowed"):
        web.fetch("https://elsewhere.invalid/")
    listed = HttpSearchProvider(
        "https://search.invalid/api",
        enabled=True,
        allowed_hosts=("b.invalid",),
        transport=_recording(seen, _page),
    )
    assert listed.fetch("https://docs.b.invalid/x") == "page"  # subdomains of a listed host
    assert listed.fetch("https://b.invalid/moved") == "page"  # a same-host redirect is fine
    with pytest.raises(WebError, match="not allowed"):
        listed.fetch("https://notb.invalid/x")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8765/run",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost:8000/retrieve",
        "http://0.0.0.0/",
    ],
)
def test_private_addresses_are_refused_even_when_any_host_is_allowed(url):
    seen: list[str] = []
    web = HttpSearchProvider(
        "https://search.invalid/api",
        enabled=True,
        allowed_hosts=("*",),
        transport=_recording(seen, _page),
    )
    with pytest.raises(WebError, match="not a public address"):
        web.fetch(url)
    assert seen == []  # no request was made


def test_redirects_into_private_addresses_are_refused():
    seen: list[str] = []
    web = HttpSearchProvider(
        "https://search.invalid/api",
        enabled=True,
        allowed_hosts=("a.invalid",),
        transport=_recording(seen, _page),
    )
    with pytest.raises(WebError, match="not allowed|not a public address"):
        web.fetch("https://a.invalid/to-metadata")
    assert seen == ["https://a.invalid/to-metadata"]  # the redirect was not followed


def test_pages_are_cut_at_the_size_limit_while_reading():
    pulled = []

    def endless():
        while True:
            pulled.append(1)
            yield b"x" * 1000

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/declared":
            return httpx.Response(
                200, headers={"content-type": "text/html", "content-length": str(10**9)}
            )
        return httpx.Response(200, content=endless(), headers={"content-type": "text/plain"})

    web = HttpSearchProvider(
        "https://search.invalid/api",
        enabled=True,
        allowed_hosts=("a.invalid",),
        max_page_bytes=10_000,
        transport=httpx.MockTransport(respond),
    )
    assert len(web.fetch("https://a.invalid/endless")) == 10_000
    assert len(pulled) <= 11  # reading stopped at the limit
    with pytest.raises(WebError, match="too large"):
        web.fetch("https://a.invalid/declared")


def test_a_search_provider_that_is_down_is_an_infrastructure_error(monkeypatch):
    """Not the model's doing: raised through call_tool (the episode is replayed or dropped),
    while a page the model picked that cannot be fetched stays an observation."""
    from agentic_rl.tools.base import ToolInfrastructureError
    from agentic_rl.tools.web import WebSearchUnavailable

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api":
            return httpx.Response(503)
        return httpx.Response(200, json={"unexpected": "shape"})

    monkeypatch.setenv("AGENTIC_RL_WEB_API_KEY", "k")
    down = HttpSearchProvider(
        "https://search.invalid/api", enabled=True, transport=httpx.MockTransport(handler)
    )
    with pytest.raises(WebSearchUnavailable, match="web search failed") as info:
        down.search("q", 1)
    assert isinstance(info.value, ToolInfrastructureError)
    odd = HttpSearchProvider(
        "https://search.invalid/other", enabled=True, transport=httpx.MockTransport(handler)
    )
    with pytest.raises(WebSearchUnavailable, match="has no list"):
        odd.search("q", 1)
    down.close()
    odd.close()

"""RetrieverClient and SearchClientTool against real servers: retries, timeouts, dead ports,
Search-R1 formatting and the record/replay cache."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agentic_rl.retrieval.client import (
    QueryCache,
    RetrievalError,
    RetrievalUnavailable,
    RetrieverClient,
    SearchClientTool,
)
from agentic_rl.retrieval.corpus import load_corpus
from agentic_rl.retrieval.index import build_index, load_index
from agentic_rl.retrieval.server import BackgroundServer, bind_socket, create_app
from agentic_rl.tools.base import ToolError, ToolInfrastructureError, call_tool, result_tag_of
from agentic_rl.tools.search import BM25Search


class FailFirst:
    """ASGI wrapper answering the first `failures` /retrieve requests with a 500."""

    def __init__(self, app, failures: int) -> None:
        self.app, self.failures, self.seen = app, failures, 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/retrieve":
            self.seen += 1
            if self.failures > 0:
                self.failures -= 1
                headers = [(b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 500, "headers": headers})
                await send({"type": "http.response.body", "body": b'{"detail": "try later"}'})
                return
        await self.app(scope, receive, send)


class Slow:
    def __init__(self, inner, delay_s: float) -> None:
        self.inner, self.delay_s, self.info = inner, delay_s, {}

    def retrieve(self, queries, topk):
        time.sleep(self.delay_s)
        return self.inner.retrieve(queries, topk)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, toy_corpus):
    return load_index(build_index(toy_corpus, "bm25", tmp_path_factory.mktemp("cli") / "idx"))


@pytest.fixture(scope="module")
def server(retriever):
    counted = FailFirst(create_app(retriever), failures=0)
    with BackgroundServer(counted) as running:
        running.counter = counted
        yield running


def dead_url() -> str:
    sock = bind_socket()  # a port nobody listens on once the socket is closed
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


def test_tool_output_matches_in_process_bm25_tool(server, toy_corpus):
    tool = SearchClientTool(server.url)
    local = BM25Search(load_corpus(toy_corpus))
    assert tool.name == "search" and result_tag_of(tool) == "information"
    assert tool.parameters == local.parameters
    for query in ["Zorvan Kettle", "engine", "kettle tea", "xyzzy plugh"]:
        assert tool(query=query) == local(query=query)
    assert tool(query="xyzzy plugh") == "No results found for 'xyzzy plugh'."
    with pytest.raises(ToolError, match="empty search query"):
        tool(query="  ")


def test_client_accepts_root_or_endpoint_url(server):
    for url in (server.url, server.url + "/", server.url + "/retrieve"):
        rows = RetrieverClient(url).retrieve(["kettle", "Python"], topk=1)
        assert [row[0]["document"]["id"] for row in rows] == ["kettle", "python"]
    bare = RetrieverClient(server.url).retrieve(["kettle"], topk=1, return_scores=False)
    assert bare[0][0]["id"] == "kettle"
    assert RetrieverClient(server.url).health()["status"] == "ok"


def test_retries_after_a_500(retriever):
    flaky = FailFirst(create_app(retriever), failures=1)
    with BackgroundServer(flaky) as running:
        client = RetrieverClient(running.url, retries=2, backoff_s=0.01)
        rows = client.retrieve(["kettle"], topk=1)
        assert rows[0][0]["document"]["id"] == "kettle"
        assert flaky.seen == 2  # one failure, one success


def test_gives_up_after_retries_with_the_server_message(retriever):
    broken = FailFirst(create_app(retriever), failures=100)
    with BackgroundServer(broken) as running:
        client = RetrieverClient(running.url, retries=2, backoff_s=0.01)
        with pytest.raises(
            RetrievalError, match=r"unavailable after 3 attempt\(s\): server error 500: try later"
        ):
            client.retrieve(["kettle"])
        assert broken.seen == 3


def test_4xx_is_not_retried(server):
    before = server.counter.seen
    with pytest.raises(RetrievalError, match=r"rejected \(422\): 'topk' must be an integer"):
        RetrieverClient(server.url, retries=3).retrieve(["kettle"], topk=1000)
    assert server.counter.seen == before + 1


def test_timeout_against_a_slow_server(retriever):
    with BackgroundServer(create_app(Slow(retriever, delay_s=1.5))) as running:
        tool = SearchClientTool(running.url, timeout_s=0.2, retries=2)
        start = time.monotonic()
        # A slow server is infrastructure, not the model's doing: never an observation.
        with pytest.raises(RetrievalUnavailable, match=r"timed out: no answer within 0.2 s"):
            call_tool(tool, {"query": "kettle"}, timeout_s=10)
        elapsed = time.monotonic() - start
    assert elapsed < 1.0  # a read timeout is not retried by default


def test_unreachable_server_is_an_infrastructure_error_not_an_observation():
    url = dead_url()
    tool = SearchClientTool(url, retries=1, backoff_s=0.01)
    with pytest.raises(RetrievalUnavailable) as info:
        tool(query="kettle")
    message = str(info.value)
    assert f"search server at {url}/retrieve unavailable after 2 attempt(s)" in message
    assert "could not connect (ConnectError" in message
    assert isinstance(info.value, ToolInfrastructureError)
    # call_tool turns model mistakes into observations, but lets this one through
    with pytest.raises(ToolInfrastructureError):
        call_tool(tool, {"query": "kettle"}, timeout_s=10)


def test_record_then_replay_without_the_server(retriever, tmp_path):
    cache = tmp_path / "cache.jsonl"
    counted = FailFirst(create_app(retriever), failures=0)
    with BackgroundServer(counted) as running:
        recorder = SearchClientTool(running.url, cache_path=cache, cache_mode="record")
        recorded = [recorder(query=q) for q in ["kettle", "engine", "kettle"]]
        assert counted.seen == 2  # the repeated query came from the cache
        rows = recorder.retrieve(["engine", "Python", "Python"])
        assert counted.seen == 3  # only "Python" was fetched, once
        assert rows[1] == rows[2]
    lines = [json.loads(line) for line in cache.read_text().splitlines()]
    assert [(row["query"], row["topk"]) for row in lines] == [
        ("kettle", 3),
        ("engine", 3),
        ("Python", 3),
    ]
    replayer = SearchClientTool(None, cache_path=cache, cache_mode="replay")
    assert [replayer(query=q) for q in ["kettle", "engine", "kettle"]] == recorded
    with pytest.raises(ToolError, match=r"no cached result for query 'unseen' \(topk=3\)"):
        replayer(query="unseen")
    with pytest.raises(ToolError, match="no cached result"):
        replayer.retrieve(["kettle"], topk=5)  # the key includes topk


def test_cache_configuration_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="record it first"):
        SearchClientTool(None, cache_path=tmp_path / "none.jsonl", cache_mode="replay")
    with pytest.raises(ValueError, match="needs a cache_path"):
        SearchClientTool("http://127.0.0.1:1", cache_mode="record")
    with pytest.raises(ValueError, match="cache_mode must be one of"):
        SearchClientTool("http://127.0.0.1:1", cache_mode="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="server url is needed"):
        SearchClientTool(None)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "a", "topk": 3, "result": []}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: bad cache line"):
        QueryCache(bad, "replay")


def test_cache_is_safe_under_threads(tmp_path):
    cache = QueryCache(tmp_path / "c.jsonl", "record")

    def put(i: int) -> None:
        for j in range(20):
            cache.put(f"q{j}", 3, [{"document": {"id": str(i), "contents": "x"}, "score": 1.0}])

    threads = [threading.Thread(target=put, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 20
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == 20
    assert len(QueryCache(tmp_path / "c.jsonl", "replay")) == 20

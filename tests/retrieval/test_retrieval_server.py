"""The real HTTP server (uvicorn on 127.0.0.1, a free port, a background thread), via httpx."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from agentic_rl.retrieval.index import build_index, load_index
from agentic_rl.retrieval.server import (
    BackgroundServer,
    Limits,
    MicroBatcher,
    RequestError,
    bind_socket,
    create_app,
    parse_retrieve_request,
)


@pytest.fixture(scope="module")
def toy_index(tmp_path_factory, toy_corpus):
    return build_index(toy_corpus, "bm25", tmp_path_factory.mktemp("srv") / "bm25")


class CountingRetriever:
    """Wraps a retriever to count calls and queries (to observe batching)."""

    def __init__(self, inner, delay_s: float = 0.0) -> None:
        self.inner, self.delay_s = inner, delay_s
        self.calls: list[int] = []
        self.info = {"kind": "counting"}
        self._lock = threading.Lock()

    def retrieve(self, queries, topk):
        with self._lock:
            self.calls.append(len(queries))
        time.sleep(self.delay_s)
        return self.inner.retrieve(queries, topk)


@pytest.fixture(scope="module")
def server(toy_index):
    with BackgroundServer(create_app(load_index(toy_index), Limits(max_queries=8))) as running:
        yield running


def post(server, body, raw: bytes | None = None) -> httpx.Response:
    if raw is not None:
        return httpx.post(f"{server.url}/retrieve", content=raw, timeout=10)
    return httpx.post(f"{server.url}/retrieve", json=body, timeout=10)


def test_response_schema_with_scores(server):
    response = post(server, {"queries": ["Zorvan Kettle"], "topk": 2, "return_scores": True})
    assert response.status_code == 200
    body = response.json()
    assert list(body) == ["result"]
    (row,) = body["result"]
    assert len(row) == 2
    for item in row:
        assert set(item) == {"document", "score"}
        assert set(item["document"]) == {"id", "contents"}
        assert isinstance(item["score"], float)
    assert row[0]["document"]["id"] == "zorvan"
    assert row[0]["document"]["contents"].startswith('"Zorvan Kettle"\n')
    assert row[0]["score"] > row[1]["score"]


def test_batch_of_queries_keeps_order(server):
    queries = ["kettle tea", "Python programming", "river Ness", "nothing matches xyzzy"]
    body = post(server, {"queries": queries, "topk": 1, "return_scores": True}).json()
    assert [[i["document"]["id"] for i in row] for row in body["result"]] == [
        ["kettle"],
        ["python"],
        ["brimholt"],
        [],
    ]


def test_return_scores_false_gives_bare_documents(server):
    # Search-R1's default: return_scores omitted means false, topk omitted means the default (3).
    body = post(server, {"queries": ["Zorvan Kettle"]}).json()
    (row,) = body["result"]
    assert row[0] == {"id": "zorvan", "contents": row[0]["contents"]}
    assert all("score" not in doc for doc in row)
    assert len(row) == 2  # topk 3, but only two documents share a word with the query
    body = post(server, {"queries": ["Zorvan Kettle"], "topk": None, "return_scores": False})
    assert body.json()["result"] == [row]


def test_health(server):
    response = httpx.get(f"{server.url}/health", timeout=10)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["kind"] == "bm25"
    assert response.json()["num_docs"] == 8


MALFORMED = [
    ({"topk": 3}, 422, "'queries' is required"),
    ({"queries": "just a string"}, 422, "list of strings"),
    ({"queries": ["ok", 5]}, 422, "list of strings"),
    ({"queries": ["q"], "topk": 0}, 422, "'topk' must be an integer in [1, 100]"),
    ({"queries": ["q"], "topk": 101}, 422, "got 101"),
    ({"queries": ["q"], "topk": "3"}, 422, "got '3'"),
    ({"queries": ["q"], "topk": True}, 422, "got True"),
    ({"queries": ["q"], "return_scores": "yes"}, 422, "'return_scores' must be true or false"),
    ({"queries": ["q"] * 9}, 422, "too many queries: 9 > 8"),
    ({"queries": ["q" * 5000]}, 422, "characters"),
    ({"queries": ["q"], "top_k": 3}, 422, "unknown field(s): top_k"),
    ([1, 2], 422, "JSON object"),
]


@pytest.mark.parametrize(("body", "status", "message"), MALFORMED)
def test_malformed_requests_get_4xx_and_server_keeps_serving(server, body, status, message):
    response = post(server, body)
    assert response.status_code == status
    assert message in response.json()["detail"]
    ok = post(server, {"queries": ["kettle"], "topk": 1, "return_scores": True})
    assert ok.status_code == 200 and ok.json()["result"][0][0]["document"]["id"] == "kettle"


def test_body_that_is_not_json(server):
    for raw in (b"{queries: [", b"", b"\xff\xfe"):
        response = post(server, None, raw=raw)
        assert response.status_code == 400
        assert response.json()["detail"] == "body is not valid JSON"
    assert httpx.get(f"{server.url}/retrieve", timeout=10).status_code == 405
    assert post(server, {"queries": []}).json() == {"result": []}


def test_body_size_limit(toy_index):
    with pytest.raises(RequestError) as info:
        parse_retrieve_request(b"x" * 100, Limits(max_body_bytes=10))
    assert info.value.status == 413
    app = create_app(load_index(toy_index), Limits(max_body_bytes=200))
    with BackgroundServer(app) as running:
        big = post(running, {"queries": ["kettle " * 40]})
        assert big.status_code == 413 and "larger than 200 bytes" in big.json()["detail"]
        assert post(running, {"queries": ["kettle"]}).status_code == 200


def test_retrieval_failure_is_500_and_server_survives(toy_index):
    class Flaky(CountingRetriever):
        def retrieve(self, queries, topk):
            if "boom" in queries:
                raise RuntimeError("index exploded")
            return super().retrieve(queries, topk)

    app = create_app(Flaky(load_index(toy_index)))
    with BackgroundServer(app) as running:
        bad = post(running, {"queries": ["boom"]})
        assert bad.status_code == 500
        assert "RuntimeError: index exploded" in bad.json()["detail"]
        assert post(running, {"queries": ["kettle"]}).status_code == 200


def test_concurrent_requests_are_merged_into_batches(toy_index):
    counting = CountingRetriever(load_index(toy_index), delay_s=0.05)
    app = create_app(counting, batch_wait_ms=50)
    queries = ["kettle", "Python", "Brimholt", "engine", "Cat Stevens", "felines"]
    with BackgroundServer(app) as running:

        async def fire() -> list[dict]:
            async with httpx.AsyncClient(timeout=10) as client:
                replies = await asyncio.gather(
                    *(
                        client.post(
                            f"{running.url}/retrieve",
                            json={"queries": [q], "topk": 1, "return_scores": True},
                        )
                        for q in queries
                    )
                )
            return [r.json() for r in replies]

        replies = asyncio.run(fire())
    expected = [counting.inner.retrieve([q], 1) for q in queries]
    assert [r["result"] for r in replies] == expected  # each caller gets its own rows
    assert sum(counting.calls) == len(queries)
    assert len(counting.calls) < len(queries)  # merged: fewer retrieve calls than requests


def test_micro_batcher_keeps_topk_groups_apart(toy_index):
    counting = CountingRetriever(load_index(toy_index))
    batcher = MicroBatcher(counting, max_wait_s=0.02)

    async def run() -> list:
        return await asyncio.gather(
            batcher.submit(["kettle"], 1), batcher.submit(["kettle"], 2), batcher.submit([], 2)
        )

    one, two, empty = asyncio.run(run())
    assert len(one[0]) == 1 and len(two[0]) == 2 and empty == []
    assert sorted(counting.calls) == [1, 1]


def test_serve_retriever_command_in_a_subprocess(toy_index):
    sock = bind_socket()  # find a free port, then release it for the child
    port = sock.getsockname()[1]
    sock.close()
    cmd = [sys.executable, "-m", "agentic_rl.retrieval.cli", "serve-retriever", str(toy_index)]
    cmd += ["--port", str(port), "--topk", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).json()
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read().decode()
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.1)
        assert health["default_topk"] == 1
        reply = httpx.post(f"http://127.0.0.1:{port}/retrieve", json={"queries": ["kettle"]})
        assert json.loads(reply.content)["result"][0][0]["id"] == "kettle"
    finally:
        proc.terminate()
        proc.wait(timeout=10)

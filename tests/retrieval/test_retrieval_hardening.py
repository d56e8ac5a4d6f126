"""The retrieval server under hostile input: deep JSON is a 400, a chunked body over the limit a
413, a token guards it (the client sends it; a wrong one is an infrastructure error), and a
public bind without a token is refused before the index loads."""

from __future__ import annotations

import httpx
import pytest

from agentic_rl.retrieval.client import RetrievalUnavailable, RetrieverClient
from agentic_rl.retrieval.corpus import load_corpus
from agentic_rl.retrieval.server import BackgroundServer, Limits, create_app, serve
from agentic_rl.tools.search import BM25Search


@pytest.fixture(scope="module")
def server(toy_corpus):
    app = create_app(BM25Search(load_corpus(toy_corpus)), Limits(max_body_bytes=2000), token="t")
    with BackgroundServer(app) as running:
        yield running


AUTH = {"Authorization": "Bearer t"}


def test_deep_json_is_a_400(server):
    deep = b'{"queries": ' + b"[" * 900 + b"]" * 900 + b"}"  # under the size limit
    r = httpx.post(f"{server.url}/retrieve", content=deep, headers=AUTH)
    assert r.status_code == 400 and "nested more than" in r.json()["detail"]


def test_chunked_body_over_the_limit_is_a_413(server):
    def chunks():
        for _ in range(1000):
            yield b" " * 100

    r = httpx.post(f"{server.url}/retrieve", content=chunks(), headers=AUTH)
    assert r.status_code == 413 and "2000 bytes" in r.json()["detail"]
    r = httpx.post(f"{server.url}/retrieve", json={"queries": ["kettle"]}, headers=AUTH)
    assert r.status_code == 200  # and it keeps serving


def test_token_is_checked_and_sent_by_the_client(server, monkeypatch):
    assert httpx.post(f"{server.url}/retrieve", json={"queries": ["x"]}).status_code == 401
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert RetrieverClient(server.url, token="t").retrieve(["kettle"], topk=1)[0]
    monkeypatch.setenv("AGENTIC_RL_API_TOKEN", "t")
    assert RetrieverClient(server.url).retrieve(["kettle"], topk=1)[0]  # from the environment
    with pytest.raises(RetrievalUnavailable, match=r"refused access \(401\)"):
        RetrieverClient(server.url, token="wrong").retrieve(["kettle"])


def test_public_bind_without_a_token_is_refused_before_loading(monkeypatch, tmp_path):
    monkeypatch.delenv("AGENTIC_RL_API_TOKEN", raising=False)
    with pytest.raises(ValueError, match="serve-retriever bound to 0.0.0.0.*--auth-token"):
        serve(tmp_path / "no-index-here", host="0.0.0.0")

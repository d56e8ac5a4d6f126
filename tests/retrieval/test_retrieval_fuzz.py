"""Fuzz the retrieval server from its own OpenAPI schema (schemathesis): valid and invalid
bodies, headers and paths may never reach a 5xx, and every request must be answered (each call
has a timeout, so a hang fails the test instead of stalling it)."""

from __future__ import annotations

import pytest

pytest.importorskip("schemathesis")
from fuzzing import fuzz_server  # noqa: E402

from agentic_rl.retrieval.corpus import load_corpus  # noqa: E402
from agentic_rl.retrieval.server import BackgroundServer, create_app  # noqa: E402
from agentic_rl.tools.search import BM25Search  # noqa: E402

TOKEN = "fuzz-token"


@pytest.mark.fuzz
def test_retrieval_server_never_answers_5xx(toy_corpus):
    retriever = BM25Search(load_corpus(toy_corpus))
    with BackgroundServer(create_app(retriever, batch_wait_ms=1.0, token=TOKEN)) as server:
        calls = fuzz_server(server.url, TOKEN, max_examples=50)
    print(f"fuzz calls per operation: {dict(calls)}")  # the figures in bench/README.md
    assert calls["POST /retrieve"] >= 25 and calls["GET /health"] >= 1

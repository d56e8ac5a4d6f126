"""Retrieval stack: Search-R1 corpora, BM25 / dense / ANN / hybrid indexes, reranking, and an
HTTP server + client with Search-R1's `/retrieve` API.

    write_builtin_corpus("corpus.jsonl")                 # or bring your own Search-R1 JSONL
    build_index("corpus.jsonl", "hybrid", "idx/")        # bm25 | dense | hnsw | ivf | hybrid
    retriever = load_index("idx/", rerank=20)
    retriever.retrieve(["who founded ..."], topk=3)      # [[{"document": {...}, "score": ...}]]

Names are resolved lazily, so `import agentic_rl.retrieval` imports neither faiss, torch,
transformers nor bm25s; each loads when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CorpusError": "corpus",
    "load_corpus": "corpus",
    "iter_corpus": "corpus",
    "write_corpus": "corpus",
    "write_builtin_corpus": "corpus",
    "make_contents": "corpus",
    "build_index": "index",
    "load_index": "index",
    "read_meta": "index",
    "IndexFormatError": "index",
    "IndexRetriever": "index",
    "Retriever": "index",
    "INDEX_KINDS": "index",
    "create_app": "server",
    "serve": "server",
    "BackgroundServer": "server",
    "RetrieverClient": "client",
    "SearchClientTool": "client",
    "RetrievalError": "client",
    "RetrievalUnavailable": "client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentic_rl.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(f"agentic_rl.retrieval.{module}"), name)

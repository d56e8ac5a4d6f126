"""BM25 search over an in-memory corpus, with Search-R1's document format.

The corpus uses Search-R1's JSONL rows: `{"id": str, "contents": "\"Title\"\ntext"}`. Results are
rendered exactly as Search-R1's `_passages2string` does (title line kept verbatim, quotes
included), so prompts and checkpoints move between this project and Search-R1 setups unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from agentic_rl.tools.base import ToolError


def split_title(contents: str) -> tuple[str, str]:
    """Split Search-R1 `contents` into (title line, body text)."""
    title, _, text = contents.partition("\n")
    return title, text


def format_results(results: list[dict[str, Any]]) -> str:
    """Render retrieval results like Search-R1: `Doc 1(Title: "T") text` one per line."""
    lines = []
    for index, item in enumerate(results, start=1):
        title, text = split_title(item["document"]["contents"])
        lines.append(f"Doc {index}(Title: {title}) {text}")
    return "\n".join(lines)


SEARCH_DESCRIPTION = "Search the knowledge base and return the most relevant documents."


def search_parameters() -> dict[str, Any]:
    """The JSON schema of a `search` tool's arguments: one string, the query.

    Why one: the BM25 tool, the retrieval-server client and the simulated engine stand in for
    one another under the name "search", so the model must be shown the same interface
    whichever of them answers.
    """
    return {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "The search query."}},
        "required": ["query"],
        "additionalProperties": False,
    }


def answer_search(retrieve: Callable[[list[str]], list[list[dict[str, Any]]]], query: str) -> str:
    """What a `search` tool returns for `query`: the documents `retrieve` finds for it in
    Search-R1's format, or a line saying there were none.

    Why one: BM25, a retrieval server and a simulated engine all answer the `search` tool, and
    the model must meet the same replies from each: an empty query is its own mistake (a
    ToolError, shown to it), and a search without hits reads the same everywhere.
    """
    if not isinstance(query, str) or not query.strip():
        raise ToolError("empty search query; write the words to search for")
    results = retrieve([query])[0]
    if not results:
        return f"No results found for '{query.strip()}'."
    return format_results(results)


def import_bm25s() -> ModuleType:
    """bm25s, imported lazily (keeps `import agentic_rl.tools` fast) and without letting JAX
    take the GPU.

    Where JAX is installed, importing bm25s runs a JAX top-k at once, and JAX's default is to
    preallocate 75% of each GPU's memory in every process: a trainer on the same GPU then runs
    out of memory at its first allocation. Unless the user set it, XLA_PYTHON_CLIENT_PREALLOCATE
    is turned off first, so JAX allocates only what bm25s uses.
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import bm25s

    return bm25s


def bm25_tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-case, English stopwords, plain token strings (not ids: query ids would index the
    query's own vocabulary). The one tokenisation of every BM25 index here, so an index built
    by `retrieval` ranks as this tool does."""
    return import_bm25s().tokenize(
        texts, lower=True, stopwords="en", return_ids=False, show_progress=False
    )


@dataclass
class BM25Search:
    """Tool "search": BM25 over `corpus`, returning the top `topk` documents as text.

    The index is built once in the constructor (a few ms per thousand short documents) and is
    read-only afterwards, so one instance can be shared by many envs and threads.
    """

    corpus: list[dict[str, str]]
    topk: int = 3
    name: str = "search"
    description: str = SEARCH_DESCRIPTION
    parameters: dict[str, Any] = field(default_factory=search_parameters)
    result_tag: str = "information"
    _retriever: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        bm25s = import_bm25s()
        if not self.corpus:
            raise ValueError("BM25Search needs a non-empty corpus")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        self._retriever = bm25s.BM25()
        self._retriever.index(
            bm25_tokenize([doc["contents"] for doc in self.corpus]), show_progress=False
        )

    def retrieve(self, queries: list[str], topk: int | None = None) -> list[list[dict[str, Any]]]:
        """Top documents per query as `{"document": {"id", "contents"}, "score": float}`.

        Documents with score 0 (no query term in common) are left out, so a query of only
        stopwords or unknown words returns an empty list rather than arbitrary documents.
        """
        k = min(topk or self.topk, len(self.corpus))
        if not queries:
            return []
        ids, scores = self._retriever.retrieve(
            bm25_tokenize(list(queries)), k=k, show_progress=False
        )
        results = []
        for row_ids, row_scores in zip(ids, scores, strict=True):
            row = []
            for doc_index, score in zip(row_ids, row_scores, strict=True):
                if score <= 0:
                    continue
                doc = self.corpus[int(doc_index)]
                row.append(
                    {
                        "document": {"id": doc["id"], "contents": doc["contents"]},
                        "score": float(score),
                    }
                )
            results.append(row)
        return results

    def __call__(self, query: str) -> str:
        return answer_search(self.retrieve, query)

"""BM25 index over a corpus with bm25s: build, save, memory-mapped load, batched search.

Tokenisation is `tools/search.py`'s `bm25_tokenize` (lower-case, English stopwords, plain token
strings), so an index built here ranks documents exactly as the in-process `BM25Search` tool does.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentic_rl.tools.search import bm25_tokenize, import_bm25s

Hits = list[list[tuple[int, float]]]
"""Per query, `(document row, score)` pairs, best first."""


@dataclass
class BM25Index:
    """A bm25s index whose document rows are positions in the corpus list.

    Read-only after build/load, so one instance can serve many threads.
    """

    model: Any  # bm25s.BM25
    num_docs: int

    @classmethod
    def build(cls, contents: list[str]) -> BM25Index:
        """Index the given document texts (row i = contents[i])."""
        if not contents:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        model = import_bm25s().BM25()
        model.index(bm25_tokenize(contents), show_progress=False)
        return cls(model=model, num_docs=len(contents))

    def save(self, directory: str | Path) -> None:
        """Write the index files (numpy arrays + vocabulary JSON) into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: str | Path, num_docs: int, mmap: bool = True) -> BM25Index:
        """Load an index saved by `save`.

        With `mmap=True` the score matrix stays on disk and pages in on demand, so a large index
        opens instantly and several server processes share one copy in the page cache.
        """
        directory = Path(directory)
        if not (directory / "params.index.json").is_file():
            raise FileNotFoundError(f"no bm25s index in {directory} (params.index.json missing)")
        model = import_bm25s().BM25.load(str(directory), mmap=mmap, show_progress=False)
        return cls(model=model, num_docs=num_docs)

    def search(self, queries: list[str], topk: int) -> Hits:
        """Top `topk` rows per query. Rows with score 0 (no shared term) are dropped, so a query
        of only stopwords or unknown words returns nothing rather than arbitrary documents."""
        if not queries:
            return []
        k = max(1, min(topk, self.num_docs))
        rows, scores = self.model.retrieve(bm25_tokenize(list(queries)), k=k, show_progress=False)
        return [
            [(int(row), float(score)) for row, score in zip(r, s, strict=True) if score > 0]
            for r, s in zip(np.asarray(rows), np.asarray(scores), strict=True)
        ]

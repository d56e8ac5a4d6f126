"""Index directories: `build_index` writes one, `load_index` returns a `Retriever` over it.

Layout of an index directory:

    meta.json      kind, corpus path + SHA-256, number of documents, embedding model, parameters
    corpus.jsonl   a copy of the corpus (results are served from it; the original may move)
    bm25/          bm25s files                          (kinds bm25, hybrid)
    dense.faiss    FAISS inner-product index            (kinds dense, hnsw, ivf, hybrid)

Kinds: "bm25"; "dense" (exact FAISS flat); "hnsw" and "ivf" (approximate FAISS); "hybrid"
(BM25 + flat dense, fused as in hybrid.py). Any kind can be wrapped in a reranker at load time.
A build goes to a temporary sibling folder and is renamed at the end, so a crashed build never
leaves a half-written index that loads.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agentic_rl.retrieval.corpus import Document, file_sha256, load_corpus, read_corpus

INDEX_KINDS = ("bm25", "dense", "hnsw", "ivf", "hybrid")
FORMAT = "agentic-rl-retrieval-index"
FORMAT_VERSION = 1
_FAISS_KIND = {"dense": "flat", "hnsw": "hnsw", "ivf": "ivf", "hybrid": "flat"}


class IndexFormatError(ValueError):
    """A missing, unreadable or inconsistent index directory."""


class Retriever(Protocol):
    """Search-R1 style retrieval: per query, `{"document": {"id", "contents"}, "score"}` rows."""

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]: ...


@dataclass
class IndexRetriever:
    """Documents + a searcher (anything with `search(queries, topk) -> Hits`). Thread-safe.

    Results carry the whole corpus row as `document`, as Search-R1's server does.
    """

    docs: list[Document]
    searcher: Any
    info: dict[str, Any] = field(default_factory=dict)

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise TypeError("queries must be a list of strings")
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be a positive integer, got {topk!r}")
        hits = self.searcher.search(queries, topk)
        return [
            [{"document": dict(self.docs[row]), "score": score} for row, score in row_hits[:topk]]
            for row_hits in hits
        ]

    def warmup(self) -> None:
        """Load lazily loaded parts (the embedding model) now rather than on the first query."""
        self.searcher.search(["warmup"], 1)


def _embedding_meta(model_path: str | Path | None, dim: int) -> dict[str, Any]:
    from agentic_rl.retrieval.dense import MODEL_NAME, default_model_path

    return {
        "name": MODEL_NAME,
        "path": str(model_path or default_model_path()),
        "dim": dim,
        "pooling": "mean",
        "normalized": True,
    }


def _write_dense(
    docs: list[Document],
    kind: str,
    out: Path,
    model_path: str | Path | None,
    batch_size: int,
    embeddings: Any,
    params: dict[str, Any],
) -> dict[str, Any]:
    import numpy as np

    from agentic_rl.retrieval.dense import MiniLMEmbedder, build_faiss_index, save_faiss

    if embeddings is None:
        embedder = MiniLMEmbedder(model_path, batch_size=batch_size)
        embeddings = embedder.encode([doc["contents"] for doc in docs])
    embeddings = np.asarray(embeddings, dtype=np.float32)
    if embeddings.shape[0] != len(docs):
        raise ValueError(f"{embeddings.shape[0]} embeddings for {len(docs)} documents")
    save_faiss(build_faiss_index(embeddings, _FAISS_KIND[kind], **params), out / "dense.faiss")
    return _embedding_meta(model_path, int(embeddings.shape[1]))


def build_index(
    corpus_path: str | Path,
    kind: str,
    out_dir: str | Path,
    *,
    model_path: str | Path | None = None,
    batch_size: int = 64,
    embeddings: Any = None,
    overwrite: bool = False,
    strict: bool = False,
    **params: Any,
) -> Path:
    """Build an index of `kind` over a Search-R1 JSONL corpus into `out_dir`; returns its path.

    The corpus is read with `corpus.read_corpus`: rows in the variants real corpora hold are
    rewritten into the Search-R1 layout (the index keeps that copy), lines that cannot be read
    are skipped and counted, or fail the build with `strict=True`; meta.json's
    `corpus_report` says how many lines needed which reading.

    `embeddings` ([num_docs, dim] unit vectors from the same MiniLM model, in corpus order) skips
    encoding, e.g. to build several dense kinds from one pass. `params` are stored in meta.json
    and used at load time: hnsw_m, ef_construction, ef_search (hnsw); nlist, nprobe (ivf);
    method ("score" | "rrf"), alpha, candidates, rrf_k (hybrid).
    """
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r} (valid: {', '.join(INDEX_KINDS)})")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty (pass overwrite=True / --overwrite)")
    docs, report = read_corpus(corpus_path, strict=strict)
    tmp = out.with_name(f".{out.name}.building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if report.canonical:  # byte for byte, as given
            shutil.copyfile(corpus_path, tmp / "corpus.jsonl")
        else:
            with (tmp / "corpus.jsonl").open("w", encoding="utf-8") as handle:
                for doc in docs:
                    handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
        embedding_model = None
        if kind in ("bm25", "hybrid"):
            from agentic_rl.retrieval.bm25 import BM25Index

            BM25Index.build([doc["contents"] for doc in docs]).save(tmp / "bm25")
        if kind != "bm25":
            embedding_model = _write_dense(
                docs, kind, tmp, model_path, batch_size, embeddings, params
            )
        meta = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "kind": kind,
            "corpus_path": str(Path(corpus_path).resolve()),
            "corpus_sha256": file_sha256(tmp / "corpus.jsonl"),
            "num_docs": len(docs),
            "corpus_report": report.to_dict(),
            "embedding_model": embedding_model,
            "params": params,
            "created_unix": int(time.time()),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_meta(index_dir: str | Path) -> dict[str, Any]:
    """meta.json of an index directory, checked for format and kind."""
    path = Path(index_dir) / "meta.json"
    if not path.is_file():
        raise IndexFormatError(
            f"{index_dir} is not an index directory (no meta.json); build one first"
        )
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise IndexFormatError(f"{path}: not valid JSON ({err.msg})") from None
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise IndexFormatError(f"{path}: not a version-{FORMAT_VERSION} {FORMAT} index")
    if meta.get("kind") not in INDEX_KINDS:
        raise IndexFormatError(f"{path}: unknown kind {meta.get('kind')!r}")
    return meta


def _load_dense(directory: Path, meta: dict[str, Any], model_path: str | Path | None) -> Any:
    from agentic_rl.retrieval.dense import DenseIndex, MiniLMEmbedder, load_faiss

    index = load_faiss(directory / "dense.faiss", **meta["params"])
    expected = (meta.get("embedding_model") or {}).get("dim")
    if expected is not None and index.d != expected:
        raise IndexFormatError(f"{directory}: FAISS dim {index.d} != embedding dim {expected}")
    # The path recorded at build time may be another machine's: prefer the caller's, then the
    # installed package's copy of the same model.
    return DenseIndex(MiniLMEmbedder(model_path), index)


def _doc_vectors(dense: Any) -> Any:
    # Flat and HNSW-flat indexes store the raw vectors: reuse them instead of re-encoding.
    try:
        return dense.index.reconstruct_n(0, dense.index.ntotal)
    except RuntimeError:
        return None


def _reranked(searcher: Any, docs: list[Document], dense: Any, rerank: int, cross: Any) -> Any:
    from agentic_rl.retrieval.dense import MiniLMEmbedder
    from agentic_rl.retrieval.rerank import BiEncoderReranker, CrossEncoderReranker, RerankedSearch

    texts = [doc["contents"] for doc in docs]
    if cross is not None:
        reranker: Any = CrossEncoderReranker(cross, texts)
    elif dense is not None:
        reranker = BiEncoderReranker(dense.embedder, texts, _doc_vectors(dense))
    else:
        reranker = BiEncoderReranker(MiniLMEmbedder(), texts)
    return RerankedSearch(searcher, reranker, candidates=rerank)


def load_index(
    index_dir: str | Path,
    *,
    mmap: bool = True,
    model_path: str | Path | None = None,
    rerank: int = 0,
    cross_encoder_path: str | Path | None = None,
    verify: bool = False,
    **overrides: Any,
) -> IndexRetriever:
    """A Retriever over an index directory.

    Index files are opened now (BM25 memory-mapped when `mmap`); the embedding model loads on
    the first query (call `warmup()` to load it up front). `rerank` > 0 reranks that many
    first-stage candidates with MiniLM cosine, or with the cross-encoder at `cross_encoder_path`.
    `verify` re-hashes the corpus copy (slow on big corpora). `overrides` replace stored search
    parameters (ef_search, nprobe, method, alpha, candidates, rrf_k).
    """
    directory = Path(index_dir)
    meta = read_meta(directory)
    meta["params"] = {**meta.get("params", {}), **overrides}
    corpus_file = directory / "corpus.jsonl"
    if verify and file_sha256(corpus_file) != meta["corpus_sha256"]:
        raise IndexFormatError(f"{corpus_file} does not match the SHA-256 in meta.json")
    docs = load_corpus(corpus_file)
    if len(docs) != meta["num_docs"]:
        raise IndexFormatError(
            f"{corpus_file}: {len(docs)} documents, meta.json says {meta['num_docs']}"
        )
    kind = meta["kind"]
    bm25 = dense = None
    if kind in ("bm25", "hybrid"):
        from agentic_rl.retrieval.bm25 import BM25Index

        bm25 = BM25Index.load(directory / "bm25", len(docs), mmap=mmap)
    if kind != "bm25":
        dense = _load_dense(directory, meta, model_path)
    if kind == "hybrid":
        from agentic_rl.retrieval.hybrid import HybridIndex

        keys = ("method", "alpha", "candidates", "rrf_k")
        searcher: Any = HybridIndex(
            bm25, dense, **{k: meta["params"][k] for k in keys if k in meta["params"]}
        )
    else:
        searcher = bm25 if bm25 is not None else dense
    if rerank > 0:
        searcher = _reranked(searcher, docs, dense, rerank, cross_encoder_path)
    info = {
        "kind": kind,
        "num_docs": len(docs),
        "embedding_model": (meta.get("embedding_model") or {}).get("name"),
        "rerank_candidates": rerank,
        "reranker": None if rerank <= 0 else ("cross-encoder" if cross_encoder_path else "minilm"),
    }
    return IndexRetriever(docs=docs, searcher=searcher, info=info)

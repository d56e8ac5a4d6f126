"""Index build + load round trips for every kind, on the built-in corpus and its QA tasks."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agentic_rl.envs.search.single_hop import make_search_qa_tasks
from agentic_rl.retrieval.corpus import CorpusError, load_corpus
from agentic_rl.retrieval.dense import MODEL_NAME, MiniLMEmbedder
from agentic_rl.retrieval.index import (
    INDEX_KINDS,
    IndexFormatError,
    IndexRetriever,
    build_index,
    load_index,
    read_meta,
)
from agentic_rl.tools.search import BM25Search


@pytest.fixture(scope="module")
def tasks(small_world):
    return make_search_qa_tasks("eval", 30, seed=0, num_entities=small_world)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, builtin_corpus, builtin_embeddings):
    """One index directory per kind; dense kinds reuse the session's document embeddings."""
    root = tmp_path_factory.mktemp("indexes")
    out = {}
    for kind in INDEX_KINDS:
        embeddings = None if kind == "bm25" else builtin_embeddings
        out[kind] = build_index(builtin_corpus, kind, root / kind, embeddings=embeddings)
    return out


def _share_embedder(retriever: IndexRetriever, embedder: MiniLMEmbedder) -> None:
    # Loading the model again per index would only cost time: point every searcher at one.
    for part in (retriever.searcher, getattr(retriever.searcher, "dense", None)):
        if part is not None and hasattr(part, "embedder"):
            part.embedder = embedder


@pytest.mark.parametrize("kind", INDEX_KINDS)
def test_round_trip_finds_support_doc(kind, indexes, tasks, embedder, builtin_corpus):
    retriever = load_index(indexes[kind])
    _share_embedder(retriever, embedder)
    queries = [task.fields["entity"] for task in tasks]
    results = retriever.retrieve(queries, topk=3)
    assert len(results) == len(queries)
    top1 = [row[0]["document"]["id"] for row in results]
    expected = [task.fields["support_doc_ids"][0] for task in tasks]
    hits = sum(got == want for got, want in zip(top1, expected, strict=True))
    # IVF visits a quarter of its clusters, so it may miss a few; the others are exact here.
    assert hits >= (0.8 * len(tasks) if kind == "ivf" else len(tasks))
    docs = {doc["id"]: doc for doc in load_corpus(builtin_corpus)}
    for row in results:
        assert 1 <= len(row) <= 3
        scores = [item["score"] for item in row]
        assert scores == sorted(scores, reverse=True)
        for item in row:
            assert set(item) == {"document", "score"} and isinstance(item["score"], float)
            assert item["document"] == docs[item["document"]["id"]]


def test_meta_json_describes_the_index(indexes, builtin_corpus):
    meta = read_meta(indexes["hnsw"])
    assert meta["kind"] == "hnsw"
    assert meta["num_docs"] == len(load_corpus(builtin_corpus))
    assert meta["corpus_path"] == str(builtin_corpus.resolve())
    assert len(meta["corpus_sha256"]) == 64
    assert meta["embedding_model"]["name"] == MODEL_NAME
    assert meta["embedding_model"]["dim"] == 384
    assert read_meta(indexes["bm25"])["embedding_model"] is None
    assert (indexes["bm25"] / "corpus.jsonl").read_bytes() == builtin_corpus.read_bytes()


def test_bm25_index_ranks_like_the_in_process_tool(indexes, builtin_corpus, tasks):
    tool = BM25Search(load_corpus(builtin_corpus), topk=5)
    retriever = load_index(indexes["bm25"], mmap=True)
    queries = [task.prompt for task in tasks[:10]]
    assert retriever.retrieve(queries, 5) == tool.retrieve(queries, 5)


def test_dense_build_encodes_the_corpus_itself(tmp_path, toy_corpus, embedder):
    out = build_index(toy_corpus, "dense", tmp_path / "dense", batch_size=4)
    retriever = load_index(out)
    ids = [r["document"]["id"] for r in retriever.retrieve(["kettle boiling"], 2)[0]]
    assert ids[0] == "kettle"
    vectors = retriever.searcher.index.reconstruct_n(0, 8)
    expected = embedder.encode([doc["contents"] for doc in load_corpus(toy_corpus)])
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_search_params_are_stored_and_overridable(tmp_path, builtin_corpus, builtin_embeddings):
    out = build_index(
        builtin_corpus, "ivf", tmp_path / "ivf", embeddings=builtin_embeddings, nlist=2, nprobe=1
    )
    assert read_meta(out)["params"] == {"nlist": 2, "nprobe": 1}
    assert load_index(out).searcher.index.nprobe == 1
    assert load_index(out, nprobe=2).searcher.index.nprobe == 2


def test_build_errors(tmp_path, toy_corpus, indexes):
    with pytest.raises(ValueError, match="unknown index kind 'sparse'"):
        build_index(toy_corpus, "sparse", tmp_path / "x")
    with pytest.raises(FileExistsError, match="not empty"):
        build_index(toy_corpus, "bm25", indexes["bm25"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "contents": "no quotes"}\n{"id": 2, \n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not valid JSON"):
        build_index(bad, "bm25", tmp_path / "never", strict=True)
    assert not (tmp_path / "never").exists() and not (tmp_path / ".never.building").exists()
    # Not strict: the line without a quoted title is read, the broken one skipped and counted.
    report = read_meta(build_index(bad, "bm25", tmp_path / "lenient"))["corpus_report"]
    assert report["readings"] == {"no title": 1} and report["skipped_lines"] == 1
    with pytest.raises(ValueError, match="embeddings for"):
        build_index(toy_corpus, "dense", tmp_path / "d", embeddings=np.zeros((3, 384)))


def test_overwrite_replaces_an_index(tmp_path, toy_corpus):
    out = build_index(toy_corpus, "bm25", tmp_path / "idx")
    build_index(toy_corpus, "bm25", out, overwrite=True)
    assert read_meta(out)["kind"] == "bm25"


def test_load_errors(tmp_path, indexes):
    with pytest.raises(IndexFormatError, match="no meta.json"):
        load_index(tmp_path)
    (tmp_path / "meta.json").write_text("{broken")
    with pytest.raises(IndexFormatError, match="not valid JSON"):
        load_index(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(IndexFormatError, match="not a version-1"):
        load_index(tmp_path)
    retriever = load_index(indexes["bm25"], verify=True)
    with pytest.raises(ValueError, match="topk"):
        retriever.retrieve(["x"], 0)
    with pytest.raises(TypeError, match="list of strings"):
        retriever.retrieve("x", 3)  # type: ignore[arg-type]


def test_embedder_is_thread_safe(embedder):
    texts = [f"query number {i} about kettles and engines" for i in range(6)]
    serial = embedder.encode(texts)
    with ThreadPoolExecutor(4) as pool:
        parallel = list(pool.map(lambda _: embedder.encode(texts), range(4)))
    for result in parallel:
        np.testing.assert_allclose(result, serial, atol=1e-5)
    assert np.allclose(np.linalg.norm(serial, axis=1), 1.0, atol=1e-5)
    assert embedder.encode([]).shape == (0, 384)

"""Hybrid fusion and reranking: hand-computed fusion math, then orderings on a toy corpus."""

from __future__ import annotations

import pytest

from agentic_rl.retrieval.bm25 import BM25Index
from agentic_rl.retrieval.corpus import load_corpus
from agentic_rl.retrieval.dense import DenseIndex, build_faiss_index
from agentic_rl.retrieval.hybrid import (
    HybridIndex,
    fuse,
    min_max_normalise,
    reciprocal_rank_fusion,
    score_fusion,
)
from agentic_rl.retrieval.index import build_index, load_index
from agentic_rl.retrieval.rerank import BiEncoderReranker, CrossEncoderReranker, RerankedSearch


def test_min_max_normalise():
    assert min_max_normalise([(3, 10.0), (1, 6.0), (2, 8.0)]) == {3: 1.0, 1: 0.0, 2: 0.5}
    assert min_max_normalise([(4, 2.0), (5, 2.0)]) == {4: 1.0, 5: 1.0}
    assert min_max_normalise([]) == {}


def test_score_fusion_by_hand():
    bm25 = [(0, 12.0), (1, 4.0), (2, 8.0)]  # normalised: 0 -> 1, 1 -> 0, 2 -> 0.5
    dense = [(1, 0.9), (3, 0.5), (0, 0.1)]  # normalised: 1 -> 1, 3 -> 0.5, 0 -> 0
    fused = dict(score_fusion([bm25, dense], [0.25, 0.75]))
    assert fused == pytest.approx({0: 0.25, 1: 0.75, 2: 0.125, 3: 0.375})
    assert [row for row, _ in fuse(bm25, dense, "score", alpha=0.75)] == [1, 3, 0, 2]
    assert [row for row, _ in fuse(bm25, dense, "score", alpha=0.0)] == [0, 2, 1, 3]


def test_reciprocal_rank_fusion_by_hand():
    runs = [[(7, 9.0), (8, 5.0)], [(8, 0.9), (9, 0.1)]]
    fused = dict(reciprocal_rank_fusion(runs, rrf_k=60))
    assert fused == pytest.approx({7: 1 / 61, 8: 1 / 62 + 1 / 61, 9: 1 / 62})
    # Rows 9 and 7 tie (each first in one run): the lower row index comes first.
    assert [r for r, _ in reciprocal_rank_fusion([[(9, 1.0)], [(7, 1.0)]])] == [7, 9]
    with pytest.raises(ValueError, match="unknown fusion method"):
        fuse([], [], "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="alpha"):
        fuse([], [], alpha=1.5)


@pytest.fixture(scope="module")
def toy(toy_corpus, embedder):
    docs = load_corpus(toy_corpus)
    texts = [doc["contents"] for doc in docs]
    dense = DenseIndex(embedder, build_faiss_index(embedder.encode(texts), "flat"))
    ids = [doc["id"] for doc in docs]
    return {"bm25": BM25Index.build(texts), "dense": dense, "texts": texts, "ids": ids}


def _ids(toy, hits):
    return [toy["ids"][row] for row, _ in hits]


def test_hybrid_gets_lexical_and_semantic_queries(toy):
    hybrid = HybridIndex(toy["bm25"], toy["dense"], method="score", alpha=0.5)
    # No word in common with any document: BM25 finds nothing, the dense half does.
    assert toy["bm25"].search(["pet kitten"], 3) == [[]]
    lexical, semantic = hybrid.search(["Zorvan Kettle", "pet kitten"], 3)
    assert _ids(toy, lexical)[0] == "zorvan"
    assert _ids(toy, semantic)[0] == "felines"


def test_hybrid_alpha_moves_the_ranking(toy):
    # "repairing an engine": BM25 prefers the poem (engine x3), MiniLM the car-repair page.
    query = ["repairing an engine"]
    assert _ids(toy, toy["bm25"].search(query, 2)[0]) == ["poem", "car"]
    assert _ids(toy, toy["dense"].search(query, 2)[0]) == ["car", "poem"]
    lexical = HybridIndex(toy["bm25"], toy["dense"], alpha=0.2).search(query, 2)[0]
    semantic = HybridIndex(toy["bm25"], toy["dense"], alpha=0.8).search(query, 2)[0]
    assert _ids(toy, lexical) == ["poem", "car"]
    assert _ids(toy, semantic) == ["car", "poem"]
    rrf = HybridIndex(toy["bm25"], toy["dense"], method="rrf").search(query, 3)[0]
    assert set(_ids(toy, rrf)[:2]) == {"poem", "car"}  # each first in one run: a tie


def test_bi_encoder_rerank_fixes_bm25_order(toy, embedder):
    query = ["repairing an engine"]
    reranker = BiEncoderReranker(embedder, toy["texts"])  # encodes candidates on demand
    reranked = RerankedSearch(toy["bm25"], reranker, candidates=5).search(query, 2)[0]
    assert _ids(toy, reranked) == ["car", "poem"]
    dense_scores = dict(toy["dense"].search(query, 8)[0])
    for row, score in reranked:  # the rerank score is the MiniLM cosine
        assert score == pytest.approx(dense_scores[row], abs=1e-5)
    # Precomputed vectors give the same answer without encoding documents.
    vectors = toy["dense"].index.reconstruct_n(0, len(toy["texts"]))
    fast = BiEncoderReranker(embedder, toy["texts"], doc_vectors=vectors)
    assert fast.rerank(query, toy["bm25"].search(query, 5)) == reranker.rerank(
        query, toy["bm25"].search(query, 5)
    )
    # Reranking only reorders: a query BM25 finds nothing for stays empty.
    assert RerankedSearch(toy["bm25"], reranker).search(["pet kitten"], 3) == [[]]


def test_load_index_with_rerank(tmp_path, toy_corpus):
    out = build_index(toy_corpus, "bm25", tmp_path / "bm25")
    retriever = load_index(out, rerank=5)
    assert retriever.info["reranker"] == "minilm"
    top = retriever.retrieve(["repairing an engine"], 1)[0]
    assert [item["document"]["id"] for item in top] == ["car"]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A randomly initialised 1-layer BERT classifier with MiniLM's tokenizer: no real
    cross-encoder weights are available offline, but the loading and scoring path is real."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from agentic_rl.retrieval.dense import default_model_path

    path = tmp_path_factory.mktemp("cross")
    tokenizer = AutoTokenizer.from_pretrained(str(default_model_path()), local_files_only=True)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
    )
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_cross_encoder_reranker_scores_pairs(toy, tiny_cross_encoder):
    reranker = CrossEncoderReranker(tiny_cross_encoder, toy["texts"], batch_size=3)
    candidates = toy["bm25"].search(["kettle painter", "engine"], 5)
    reranked = reranker.rerank(["kettle painter", "engine"], candidates)
    for query, before, after in zip(
        ["kettle painter", "engine"], candidates, reranked, strict=True
    ):
        assert sorted(r for r, _ in before) == sorted(r for r, _ in after)
        expected = reranker.score_pairs([(query, toy["texts"][r]) for r, _ in before])
        assert sorted(s for _, s in after) == pytest.approx(sorted(expected))
        assert [s for _, s in after] == sorted((s for _, s in after), reverse=True)


def test_cross_encoder_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="cross-encoder folder not found"):
        CrossEncoderReranker(tmp_path / "none", ["x"]).score_pairs([("q", "x")])

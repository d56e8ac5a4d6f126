"""BM25 search tool: Search-R1 output format, retrieval results, errors, lazy import."""

import os
import subprocess
import sys

import pytest

from agentic_rl.tools.base import ToolError, call_tool, result_tag_of
from agentic_rl.tools.search import BM25Search, format_results, split_title

CORPUS = [
    {
        "id": "0",
        "contents": '"Zorvan Kettle"\nZorvan Kettle is a painter born in Brimholt in 1874.',
    },
    {"id": "1", "contents": '"Brimholt"\nBrimholt is a town on the river Ness.'},
    {"id": "2", "contents": '"Aldo Fenn"\nAldo Fenn is a chemist born in Vantor in 1901.'},
    {"id": "3", "contents": '"Vantor"\nVantor is a city of bridges and mills.'},
    {"id": "4", "contents": '"Mira Kettle"\nMira Kettle plays the harp.\nShe lives in Vantor.'},
]


@pytest.fixture(scope="module")
def search() -> BM25Search:
    return BM25Search(CORPUS)


def test_tool_definition(search):
    assert search.name == "search"
    assert result_tag_of(search) == "information"
    assert search.topk == 3
    assert search.parameters["required"] == ["query"]


def test_output_matches_search_r1_format(search):
    text = search(query="Zorvan Kettle")
    lines = text.split("\n")
    assert lines[0] == (
        'Doc 1(Title: "Zorvan Kettle") Zorvan Kettle is a painter born in Brimholt in 1874.'
    )
    # Only docs sharing a term are listed: doc 0 (both words) then doc 4 ("kettle").
    assert lines[1] == 'Doc 2(Title: "Mira Kettle") Mira Kettle plays the harp.'
    assert lines[2] == "She lives in Vantor."  # Search-R1 keeps the body's own newlines
    assert len(lines) == 3


def test_retrieve_returns_scored_documents(search):
    results = search.retrieve(["Vantor", "Brimholt painter", "harp"], topk=2)
    assert [[r["document"]["id"] for r in row] for row in results] == [
        ["3", "2"],
        ["0", "1"],
        ["4"],
    ]
    for row in results:
        scores = [r["score"] for r in row]
        assert all(isinstance(s, float) and s > 0 for s in scores)
        assert scores == sorted(scores, reverse=True)
    assert results[0][0]["document"] == CORPUS[3]


def test_topk_larger_than_corpus_is_clamped(search):
    results = search.retrieve(["Vantor Kettle Brimholt Fenn"], topk=50)[0]
    assert sorted(r["document"]["id"] for r in results) == ["0", "1", "2", "3", "4"]


def test_retrieval_is_deterministic(search):
    assert search.retrieve(["Kettle"]) == search.retrieve(["Kettle"])


def test_no_match_and_empty_queries(search):
    assert search(query="the of and") == "No results found for 'the of and'."
    assert search.retrieve(["qwertyuiop"]) == [[]]
    assert search.retrieve([]) == []
    with pytest.raises(ToolError, match="empty search query"):
        search(query="   ")
    outcome = call_tool(search, {"query": ""}, timeout_s=2.0)
    assert not outcome.ok and outcome.text.startswith("Error: empty search query")


def test_bad_construction():
    with pytest.raises(ValueError, match="non-empty corpus"):
        BM25Search([])
    with pytest.raises(ValueError, match="topk"):
        BM25Search(CORPUS, topk=0)


def test_format_helpers():
    assert split_title('"T"\nline 1\nline 2') == ('"T"', "line 1\nline 2")
    item = {"document": {"id": "9", "contents": '"A"\nbody'}, "score": 1.0}
    assert format_results([item, item]) == 'Doc 1(Title: "A") body\nDoc 2(Title: "A") body'


def test_importing_tools_does_not_import_bm25s():
    code = "import sys, agentic_rl.tools, agentic_rl.envs; print('bm25s' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _env_after_import(env: dict[str, str]) -> str:
    """XLA_PYTHON_CLIENT_PREALLOCATE as a fresh process sees it after `import_bm25s()`."""
    code = (
        "import os; from agentic_rl.tools.search import import_bm25s; import_bm25s(); "
        "print(os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE'))"
    )
    base = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_bm25s_keeps_jax_from_preallocating_the_gpu_unless_the_user_chose():
    # bm25s runs a JAX top-k at import where JAX is installed; JAX's default preallocation
    # would take 75% of the GPU from the trainer in the same process (seen on an H200).
    assert _env_after_import({}) == "false"
    assert _env_after_import({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}) == "true"


def test_the_index_and_the_tool_tokenise_alike():
    from agentic_rl.retrieval.bm25 import BM25Index

    corpus = [
        {"id": "0", "contents": '"Paris"\nThe capital of France.'},
        {"id": "1", "contents": '"Rome"\nThe capital of Italy, on the Tiber.'},
    ]
    tool = BM25Search(corpus=corpus, topk=2)
    index = BM25Index.build([doc["contents"] for doc in corpus])
    for query in ("capital of Italy", "the Tiber", "France"):
        by_tool = [(int(r["document"]["id"]), r["score"]) for r in tool.retrieve([query])[0]]
        by_index = index.search([query], topk=2)[0]
        assert [row for row, _ in by_tool] == [row for row, _ in by_index]
        assert [s for _, s in by_tool] == pytest.approx([s for _, s in by_index])

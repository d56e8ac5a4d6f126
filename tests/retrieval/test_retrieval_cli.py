"""`index build`, `index builtin-corpus` and `serve-retriever` argument handling."""

from __future__ import annotations

import argparse
import json

import pytest

from agentic_rl.retrieval.cli import add_index_commands, main
from agentic_rl.retrieval.corpus import load_corpus
from agentic_rl.retrieval.index import load_index, read_meta


def test_commands_plug_into_a_parent_parser():
    parser = argparse.ArgumentParser(prog="agentic-rl")
    sub = parser.add_subparsers(dest="command", required=True)
    add_index_commands(sub)
    args = parser.parse_args(["index", "build", "c.jsonl", "--kind", "hnsw", "--out", "d"])
    assert (args.kind, args.out, args.ef_search) == ("hnsw", "d", None)
    assert callable(args.fn)
    args = parser.parse_args(["serve-retriever", "idx", "--port", "9001"])
    assert (args.index, args.host, args.port, args.topk) == ("idx", "127.0.0.1", 9001, 3)
    with pytest.raises(SystemExit):
        parser.parse_args(["index", "build", "c.jsonl", "--kind", "sparse", "--out", "d"])


def test_builtin_corpus_then_build_and_query(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    assert main(["index", "builtin-corpus", str(corpus), "--num-entities", "20"]) == 0
    assert "wrote" in capsys.readouterr().out
    out = tmp_path / "idx"
    assert main(["index", "build", str(corpus), "--kind", "bm25", "--out", str(out)]) == 0
    assert "built bm25 index of" in capsys.readouterr().out
    docs = load_corpus(corpus)
    assert read_meta(out)["num_docs"] == len(docs)
    first = docs[0]["contents"].partition("\n")[0].strip('"')
    assert load_index(out).retrieve([first], 1)[0][0]["document"]["id"] == docs[0]["id"]


def test_hybrid_parameters_reach_meta_json(tmp_path, toy_corpus, capsys):
    out = tmp_path / "hyb"
    argv = ["index", "build", str(toy_corpus), "--kind", "hybrid", "--out", str(out)]
    assert main([*argv, "--fusion", "rrf", "--alpha", "0.7", "--candidates", "5"]) == 0
    assert read_meta(out)["params"] == {"method": "rrf", "alpha": 0.7, "candidates": 5}
    hybrid = load_index(out).searcher
    assert (hybrid.method, hybrid.alpha, hybrid.candidates) == ("rrf", 0.7, 5)


def test_user_errors_exit_2_with_a_message(tmp_path, toy_corpus, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    assert main(["index", "build", str(bad), "--kind", "bm25", "--out", str(tmp_path / "o")]) == 2
    assert "bad.jsonl:1: missing key(s) contents" in capsys.readouterr().err
    out = tmp_path / "idx"
    main(["index", "build", str(toy_corpus), "--kind", "bm25", "--out", str(out)])
    assert main(["index", "build", str(toy_corpus), "--kind", "bm25", "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["serve-retriever", str(tmp_path), "--port", "1"]) == 2
    assert "no meta.json" in capsys.readouterr().err


def test_index_build_reads_corpus_variants_and_skips_broken_lines(tmp_path, capsys):
    # A public wiki sample's mix: titles in quotes or not, a title field, no title, junk.
    lines = [
        json.dumps({"id": "1", "contents": '"Alpha"\nAlpha is the first letter.'}),
        json.dumps({"id": "2", "contents": "Beta Band\nThe Beta Band was a Scottish group."}),
        json.dumps({"id": "3", "title": "Gamma ray", "text": "Gamma rays are photons."}),
        json.dumps({"id": "4", "contents": "Delta has no title line."}),
        "{broken",
    ]
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    out = tmp_path / "idx"
    assert main(["index", "build", str(corpus), "--kind", "bm25", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 quoted title, 1 unquoted title, 1 title field, 1 no title" in printed
    assert "skipped 1 line(s)" in printed and "wiki.jsonl:5: not valid JSON" in printed
    meta = read_meta(out)
    assert meta["num_docs"] == 4 and meta["corpus_report"]["skipped_lines"] == 1
    hit = load_index(out).retrieve(["Scottish group Beta Band"], 1)[0][0]["document"]
    assert hit == {"id": "2", "contents": '"Beta Band"\nThe Beta Band was a Scottish group.'}
    strict = ["index", "build", str(corpus), "--kind", "bm25", "--out", str(tmp_path / "s")]
    assert main([*strict, "--strict"]) == 2
    assert "wiki.jsonl:5: not valid JSON" in capsys.readouterr().err

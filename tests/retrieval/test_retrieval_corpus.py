"""Search-R1 JSONL corpora: validation errors name the line, round trips, the built-in dump."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_rl.retrieval.corpus import (
    CorpusError,
    file_sha256,
    load_corpus,
    make_contents,
    read_corpus,
    validate_document,
    write_builtin_corpus,
    write_corpus,
)
from agentic_rl.retrieval.qa_corpus import build_corpus


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = json.dumps({"id": "1", "contents": '"Title"\nSome text.'})


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["a", "b"]', "expected a JSON object, got list"),
        (json.dumps({"contents": '"T"\nx'}), "missing key(s) id"),
        (json.dumps({"id": "2"}), "missing key(s) contents"),
        (json.dumps({"id": "", "contents": '"T"\nx'}), "'id' must be a non-empty string"),
        (json.dumps({"id": 2.5, "contents": '"T"\nx'}), "'id' must be a non-empty string"),
        (json.dumps({"id": "2", "contents": 7}), "'contents' must be a non-empty string"),
        (json.dumps({"id": "2", "contents": "Title\ntext"}), "title in double quotes"),
        (
            json.dumps({"id": "1", "contents": '"Other"\ntext'}),
            "duplicate id '1' (first on line 1)",
        ),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, bad_line, message):
    path = _write_lines(tmp_path / "c.jsonl", [GOOD, "", bad_line])
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert f"{path}:3" in str(info.value)  # blank line 2 still counts
    assert message in str(info.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(CorpusError, match="not found"):
        load_corpus(tmp_path / "nope.jsonl")
    empty = _write_lines(tmp_path / "empty.jsonl", [""])
    with pytest.raises(CorpusError, match="has no documents"):
        load_corpus(empty)


def test_integer_ids_become_strings_and_extra_keys_are_kept(tmp_path):
    row = {"id": 7, "contents": '"T"\nx', "url": "u"}
    path = _write_lines(tmp_path / "c.jsonl", [json.dumps(row)])
    assert load_corpus(path) == [{"id": "7", "contents": '"T"\nx', "url": "u"}]


def test_title_check_can_be_disabled(tmp_path):
    path = _write_lines(tmp_path / "c.jsonl", [json.dumps({"id": "1", "contents": "no title"})])
    assert load_corpus(path, require_title=False)[0]["contents"] == "no title"


def test_write_round_trip_and_atomic_failure(tmp_path):
    docs = [{"id": "a", "contents": make_contents("Ünïcode", "text\nwith lines")}]
    path = tmp_path / "sub" / "c.jsonl"
    assert write_corpus(path, docs) == 1
    assert load_corpus(path) == docs
    with pytest.raises(CorpusError, match="document 2: duplicate id 'a'"):
        write_corpus(path, docs + docs)
    assert load_corpus(path) == docs  # the failed write left the old file alone
    assert not list(path.parent.glob("*.tmp"))
    with pytest.raises(CorpusError, match="newline"):
        make_contents("two\nlines", "x")


def test_builtin_corpus_matches_the_env_world(tmp_path):
    path = tmp_path / "builtin.jsonl"
    count = write_builtin_corpus(path, num_entities=20, seed=3)
    assert load_corpus(path) == build_corpus(20, 3)
    assert count == len(build_corpus(20, 3))
    again = tmp_path / "again.jsonl"
    write_builtin_corpus(again, num_entities=20, seed=3)
    assert file_sha256(path) == file_sha256(again)  # deterministic bytes


def test_package_import_is_light():
    code = (
        "import sys, agentic_rl.retrieval as r\n"
        "from agentic_rl.retrieval import corpus, index, server, client, cli, hybrid, rerank\n"
        "assert callable(r.build_index) and callable(r.load_corpus)\n"
        "heavy = [m for m in ('torch', 'faiss', 'transformers', 'bm25s', 'fastapi', 'httpx')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


VARIANTS = [
    json.dumps({"id": "1", "contents": '"Alpha"\nAlpha is the first letter.'}),
    json.dumps({"id": "2", "contents": "Beta Band\nThe Beta Band was a Scottish group."}),
    "",
    json.dumps({"id": "3", "title": "Gamma ray", "text": "Gamma rays are photons."}),
    json.dumps({"_id": "4", "title": "Delta", "text": "A river delta.", "url": "u"}),
    json.dumps({"id": 5, "contents": "Epsilon is small and has no title line."}),
    "{not json",
    json.dumps({"id": "6"}),
    json.dumps({"id": "1", "contents": '"Again"\nA repeated id.'}),
]


def test_read_corpus_accepts_the_variants_real_corpora_hold(tmp_path):
    path = _write_lines(tmp_path / "wiki.jsonl", VARIANTS)
    docs, report = read_corpus(path)
    assert [d["id"] for d in docs] == ["1", "2", "3", "4", "5"]
    assert [d["contents"] for d in docs] == [
        '"Alpha"\nAlpha is the first letter.',
        '"Beta Band"\nThe Beta Band was a Scottish group.',
        '"Gamma ray"\nGamma rays are photons.',
        '"Delta"\nA river delta.',
        '""\nEpsilon is small and has no title line.',
    ]
    assert docs[3]["url"] == "u" and "text" not in docs[3]  # extra keys kept, text moved
    assert report.to_dict()["readings"] == {
        "quoted title": 1,
        "unquoted title": 1,
        "title field": 2,
        "no title": 1,
    }
    assert report.skipped == 3 and not report.canonical
    assert f"{path}:7: not valid JSON" in report.problems[0]
    assert "missing key(s) contents" in report.problems[1]
    assert "duplicate id '1' (first on line 1)" in report.problems[2]
    assert "8 lines: 1 quoted title, 1 unquoted title, 2 title field" in report.summary()
    with pytest.raises(CorpusError, match=r"wiki.jsonl:7: not valid JSON"):
        read_corpus(path, strict=True)
    for doc in docs:  # what read_corpus returns passes the strict layout check
        validate_document(doc)


def test_read_corpus_of_nothing_readable_fails_with_the_reasons(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", ["{not json", json.dumps({"id": "x"})])
    with pytest.raises(CorpusError, match="no readable documents") as info:
        read_corpus(path)
    assert f"{path}:1: not valid JSON" in str(info.value)

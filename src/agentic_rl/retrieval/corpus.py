"""Search-R1 JSONL corpora: read, validate, write, hash, and dump the built-in corpus.

One document per line: `{"id": str, "contents": "\"Title\"\ntext"}`, the title in double quotes
on the first line of `contents` (the DPR wiki-18 layout Search-R1 ships). Extra keys are kept, as
Search-R1's server returns whole corpus rows. Every error names the file and the 1-based line, so
a broken row in a 21M-line corpus can be found with `sed -n Np`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

Document = dict[str, Any]


class CorpusError(ValueError):
    """A corpus file or row that does not follow the Search-R1 format; the message says where."""


def make_contents(title: str, text: str) -> str:
    """Search-R1 `contents` for a title and body: `"Title"` on the first line, then the text."""
    if "\n" in title:
        raise CorpusError(f"a title cannot contain a newline: {title!r}")
    return f'"{title}"\n{text}'


def validate_document(doc: Any, where: str = "document", require_title: bool = True) -> Document:
    """Check one row and return it with a string `id`; raise CorpusError naming `where`.

    Integer ids are accepted and turned into strings (some corpora store them as numbers);
    anything else must be a non-empty string.
    """
    if not isinstance(doc, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(doc).__name__}")
    missing = [key for key in ("id", "contents") if key not in doc]
    if missing:
        raise CorpusError(f"{where}: missing key(s) {', '.join(missing)}; need 'id' and 'contents'")
    doc_id = doc["id"]
    if isinstance(doc_id, int) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    if not isinstance(doc_id, str) or not doc_id:
        raise CorpusError(f"{where}: 'id' must be a non-empty string, got {doc['id']!r}")
    contents = doc["contents"]
    if not isinstance(contents, str) or not contents.strip():
        raise CorpusError(f"{where} (id {doc_id}): 'contents' must be a non-empty string")
    if require_title:
        title = contents.partition("\n")[0]
        if len(title) < 2 or not (title.startswith('"') and title.endswith('"')):
            raise CorpusError(
                f"{where} (id {doc_id}): the first line of 'contents' must be the title in double "
                f"quotes, e.g. '\"Title\"\\ntext'; got {title[:60]!r}"
            )
    return {**doc, "id": doc_id}


def iter_corpus(path: str | Path, require_title: bool = True) -> Iterator[Document]:
    """Yield validated documents from a JSONL file; blank lines are skipped.

    Ids must be unique: retrieval results are identified by id, and a duplicate would make the
    record/replay cache and support-doc checks ambiguous.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise CorpusError(
                    f"{where}: not valid JSON ({err.msg} at column {err.colno})"
                ) from None
            doc = validate_document(row, where, require_title)
            first = seen.setdefault(doc["id"], lineno)
            if first != lineno:
                raise CorpusError(f"{where}: duplicate id {doc['id']!r} (first on line {first})")
            yield doc


def load_corpus(path: str | Path, require_title: bool = True) -> list[Document]:
    """All documents of a Search-R1 JSONL corpus; raises CorpusError on the first bad line."""
    docs = list(iter_corpus(path, require_title))
    if not docs:
        raise CorpusError(f"corpus file {path} has no documents")
    return docs


def write_corpus(path: str | Path, docs: Iterable[Document], require_title: bool = True) -> int:
    """Validate and write documents as JSONL (UTF-8, one per line). Returns the number written.

    Written to a temporary file first and renamed, so a failed validation never leaves half a
    corpus behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    seen: set[str] = set()
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for count, doc in enumerate(docs, start=1):
                row = validate_document(doc, f"document {count}", require_title)
                if row["id"] in seen:
                    raise CorpusError(f"document {count}: duplicate id {row['id']!r}")
                seen.add(row["id"])
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return count


def file_sha256(path: str | Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (corpora can be many GB)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def write_builtin_corpus(path: str | Path, num_entities: int = 500, seed: int = 0) -> int:
    """Dump the generated search-QA corpus (qa_corpus.py) as Search-R1 JSONL.

    The same `(num_entities, seed)` as the `search_qa` env gives the same documents and ids, so
    an index built from this file answers that env's questions. Returns the number of documents.
    """
    from agentic_rl.retrieval.qa_corpus import build_corpus

    return write_corpus(path, build_corpus(num_entities, seed))

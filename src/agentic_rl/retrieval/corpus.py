"""Search-R1 JSONL corpora: read, validate, write, hash, and dump the built-in corpus.

One document per line: `{"id": str, "contents": "\"Title\"\ntext"}`, the title in double quotes
on the first line of `contents` (the DPR wiki-18 layout Search-R1 ships). Extra keys are kept, as
Search-R1's server returns whole corpus rows. Every error names the file and the 1-based line, so
a broken row in a 21M-line corpus can be found with `sed -n Np`.

Real corpora stray from that layout, so `read_corpus` (what `index build` uses) accepts the
variants they hold and rewrites each row into it, counting which reading each line needed:
"quoted title" (the layout itself), "unquoted title" (a first line not wrapped in quotes, about
12% of a public wiki-18 sample), "title field" (`{"id", "title", "text" or "contents"}`, DPR's
psgs_w100 and BEIR's `_id` rows) and "no title" (one-line contents: the title becomes `""`).
Lines that cannot be read at all (not JSON, no id, no text, a repeated id) are skipped and
counted, or fail the read with `strict=True`.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
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


READINGS = ("quoted title", "unquoted title", "title field", "no title")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def normalize_document(row: Any, where: str = "document") -> tuple[Document, str]:
    """(row in the Search-R1 layout, which reading it needed; see READINGS); raises
    CorpusError, naming `where`, for a row that cannot be read."""
    if not isinstance(row, dict):
        raise CorpusError(f"{where}: expected a JSON object, got {type(row).__name__}")
    key = "id" if "id" in row or "_id" not in row else "_id"
    body_key = "contents" if _text(row.get("contents")) or "text" not in row else "text"
    missing = [name for name, k in (("id", key), ("contents", body_key)) if k not in row]
    if missing:
        raise CorpusError(
            f"{where}: missing key(s) {', '.join(missing)}; need 'id' and 'contents' "
            "(or 'title' and 'text')"
        )
    doc = validate_document(
        {**row, "id": row[key], "contents": row[body_key]}, where, require_title=False
    )
    body, title = doc["contents"], _text(row.get("title"))
    first, newline, rest = body.partition("\n")
    quoted = len(first) >= 2 and first.startswith('"') and first.endswith('"')
    if title is not None:
        title = " ".join(title.split())
        if quoted and first == f'"{title}"':
            return doc, "quoted title"
        contents, reading = make_contents(title, body), "title field"
    elif quoted and newline:
        return doc, "quoted title"
    elif newline:
        contents, reading = make_contents(first.strip(), rest), "unquoted title"
    else:
        contents, reading = make_contents("", body), "no title"
    doc["contents"] = contents
    if body_key == "text":
        doc.pop("text")
    return doc, reading


@dataclass
class CorpusReport:
    """How `read_corpus` read a file: lines per reading, skipped lines, the first problems."""

    path: str
    readings: Counter = field(default_factory=Counter)
    skipped: int = 0
    problems: list[str] = field(default_factory=list)
    max_problems: int = 5

    @property
    def documents(self) -> int:
        return sum(self.readings.values())

    @property
    def canonical(self) -> bool:
        """Every line was already in the Search-R1 layout (nothing rewritten or skipped)."""
        return not self.skipped and self.readings["quoted title"] == self.documents

    def skip(self, problem: str) -> None:
        self.skipped += 1
        if len(self.problems) < self.max_problems:
            self.problems.append(problem)

    def to_dict(self) -> dict[str, Any]:
        return {
            "documents": self.documents,
            "readings": {r: self.readings[r] for r in READINGS if self.readings[r]},
            "skipped_lines": self.skipped,
            "first_problems": list(self.problems),
        }

    def summary(self) -> str:
        total = self.documents + self.skipped
        read = ", ".join(f"{self.readings[r]:,} {r}" for r in READINGS if self.readings[r])
        text = f"{total:,} lines: {read or 'no documents'}"
        if self.skipped:
            text += f"; skipped {self.skipped:,} broken line(s), e.g. " + " | ".join(self.problems)
        return text


def read_corpus(path: str | Path, strict: bool = False) -> tuple[list[Document], CorpusReport]:
    """All readable documents of a JSONL corpus in the Search-R1 layout, with a report.

    Each line is read as one of READINGS (module docstring); a line that cannot be read is
    skipped and counted (`strict=True`: raises CorpusError at the first one instead). Raises
    CorpusError when no document is left."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    report = CorpusReport(str(path))
    docs: list[Document] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as err:
                    raise CorpusError(
                        f"{where}: not valid JSON ({err.msg} at column {err.colno})"
                    ) from None
                doc, reading = normalize_document(row, where)
                first = seen.setdefault(doc["id"], lineno)
                if first != lineno:
                    raise CorpusError(
                        f"{where}: duplicate id {doc['id']!r} (first on line {first})"
                    )
            except CorpusError as err:
                if strict:
                    raise
                report.skip(str(err))
                continue
            report.readings[reading] += 1
            docs.append(doc)
    if not docs:
        raise CorpusError(f"corpus file {path} has no readable documents ({report.summary()})")
    return docs, report


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

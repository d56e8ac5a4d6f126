"""A persisted memory bank (SQLite) and the memory manager's operations on it (Memory-R1).

Memory-R1's manager decides, for each new fact, one Mem0-style operation over the memories
related to it: ADD a new memory, UPDATE an existing one (its id, the new text), DELETE one, or
NOOP. Operations are written as one JSON object:

    {"event": "ADD", "text": "Ana lives in Rome."}
    {"event": "UPDATE", "id": 2, "text": "Ana lives in Rome."}
    {"event": "DELETE", "id": 2}
    {"event": "NOOP"}

`parse_operation` turns the model's text into an `Operation` or an `OperationError` naming what
is wrong (no JSON, an unknown event, an id that was not shown, a missing text); the env makes the
error an observation and a counted metric, and applies nothing. The bank lives in an SQLite file
(one per episode), so it survives the process and can be inspected; retrieval ranks memories by
word overlap with a query (`overlap_score`: lower-cased words cut to their first 4 letters, so
"live" matches "lives"), ties in storage order.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

EVENTS = ("ADD", "UPDATE", "DELETE", "NOOP")
_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "is", "does", "do", "what", "where", "now", "to", "and", "has"}
_JSON = re.compile(r"\{.*?\}", re.DOTALL)


class OperationError(ValueError):
    """The manager's reply is not a valid operation; the message says why."""


@dataclass(frozen=True)
class Operation:
    event: str
    memory_id: int | None = None
    text: str = ""


def stems(text: str) -> set[str]:
    """Lower-cased words without stop words, cut to 4 letters (a crude stemmer)."""
    return {w[:4] for w in _WORD.findall(text.lower()) if w not in _STOP}


def overlap_score(query: str, memory: str) -> int:
    return len(stems(query) & stems(memory))


class MemoryBank:
    """Memories (id, text) in an SQLite file; ids are never reused."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path))
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS memories (id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT)"
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def clear(self) -> None:
        """Empty the bank and restart its ids at 1, so that an episode's ids (which the prompts
        show) do not depend on the episodes the bank held before: a reset replays exactly."""
        self._db.execute("DELETE FROM memories")
        self._db.execute("DELETE FROM sqlite_sequence WHERE name = 'memories'")
        self._db.commit()

    def add(self, text: str) -> int:
        cursor = self._db.execute("INSERT INTO memories (text) VALUES (?)", (text,))
        self._db.commit()
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def update(self, memory_id: int, text: str) -> None:
        self._db.execute("UPDATE memories SET text = ? WHERE id = ?", (text, memory_id))
        self._db.commit()

    def delete(self, memory_id: int) -> None:
        self._db.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        self._db.commit()

    def all(self) -> list[tuple[int, str]]:
        return [
            (int(i), str(t))
            for i, t in self._db.execute("SELECT id, text FROM memories ORDER BY id")
        ]

    def search(self, query: str, k: int) -> list[tuple[int, str]]:
        """The `k` memories with the most word overlap with `query` (at least one word), best
        first, ties in storage order."""
        scored = [(overlap_score(query, text), i, text) for i, text in self.all()]
        ranked = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))
        return [(i, text) for _, i, text in ranked[:k]]

    def apply(self, op: Operation) -> None:
        if op.event == "ADD":
            self.add(op.text)
        elif op.event == "UPDATE":
            assert op.memory_id is not None
            self.update(op.memory_id, op.text)
        elif op.event == "DELETE":
            assert op.memory_id is not None
            self.delete(op.memory_id)


def parse_operation(text: str, shown_ids: set[int]) -> Operation:
    """The first JSON object in `text` as an Operation over the memories `shown_ids` the manager
    was shown; OperationError if there is none or it is not a valid operation."""
    match = _JSON.search(text)
    if match is None:
        raise OperationError("no JSON operation in the reply")
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as err:
        raise OperationError(f"the operation is not valid JSON ({err.msg})") from None
    event = str(data.get("event", "")).upper()
    if event not in EVENTS:
        raise OperationError(f"unknown event {data.get('event')!r} (ADD, UPDATE, DELETE, NOOP)")
    memory_id = None
    if event in ("UPDATE", "DELETE"):
        raw = data.get("id")
        try:
            memory_id = int(raw)
        except (TypeError, ValueError):
            raise OperationError(f"{event} needs the id of a shown memory, got {raw!r}") from None
        if memory_id not in shown_ids:
            raise OperationError(f"{event} of memory {memory_id}, which was not shown")
    text_value = str(data.get("text", "")).strip()
    if event in ("ADD", "UPDATE") and not text_value:
        raise OperationError(f"{event} needs a non-empty text")
    return Operation(event, memory_id, text_value)


def render_operation(op: Operation) -> str:
    """The JSON an Operation is written as (the scripted manager's replies)."""
    data: dict[str, object] = {"event": op.event}
    if op.memory_id is not None:
        data["id"] = op.memory_id
    if op.text:
        data["text"] = op.text
    return json.dumps(data)

"""The passage store of an index: one SQLite table, row number = vector id = BM25 document id.

SQLite opens instantly whatever the corpus size and fetches only the rows a search returns.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Sequence

import attrs

from nlqo.errors import IndexFileError
from nlqo.common.passages import Passage

FILENAME = "passages.sqlite"
_SCHEMA = (
    "CREATE TABLE passages (row INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, title TEXT NOT NULL, text TEXT NOT NULL)"
)


def write_store(path: Path, passages: Iterable[Passage]) -> int:
    """Write ``passages`` in order (row 0, 1, ...) to a new SQLite file; returns the count."""
    conn = sqlite3.connect(path)
    try:
        conn.execute(_SCHEMA)
        rows = ((i, p.id, p.title, p.text) for i, p in enumerate(passages))
        conn.executemany("INSERT INTO passages VALUES (?, ?, ?, ?)", rows)
        conn.commit()
        (count,) = conn.execute("SELECT COUNT(*) FROM passages").fetchone()
    finally:
        conn.close()
    return int(count)


@attrs.define(eq=False)
class PassageStore:
    """Read-only access to the passages of an index; safe to share between threads."""

    path: Path
    count: int
    _conn: sqlite3.Connection = attrs.field(repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def open(cls, path: Path) -> PassageStore:
        if not path.is_file():
            raise IndexFileError(f"{path}: passage store is missing")
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            (count,) = conn.execute("SELECT COUNT(*) FROM passages").fetchone()
        except sqlite3.DatabaseError as exc:
            raise IndexFileError(f"{path}: not a passage store ({exc})") from exc
        return cls(path=path, count=int(count), conn=conn)

    def __len__(self) -> int:
        return self.count

    def rows(self, rows: Sequence[int]) -> list[Passage]:
        """The passages at ``rows``, in that order."""
        if not rows:
            return []
        marks = ",".join("?" * len(rows))
        with self._lock:
            found = self._conn.execute(
                f"SELECT row, id, title, text FROM passages WHERE row IN ({marks})", [int(r) for r in rows]
            ).fetchall()
        by_row = {r: Passage(id=i, title=t, text=x) for r, i, t, x in found}
        missing = [r for r in rows if r not in by_row]
        if missing:
            raise IndexFileError(f"{self.path}: rows {missing[:5]} are missing (index files out of step; rebuild it)")
        return [by_row[r] for r in rows]

    def get(self, passage_id: str) -> Passage | None:
        """The passage with this id, or ``None``."""
        with self._lock:
            found = self._conn.execute("SELECT id, title, text FROM passages WHERE id = ?", (passage_id,)).fetchone()
        return Passage(*found) if found else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()

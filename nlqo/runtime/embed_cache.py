"""Vectors of short texts kept on disk, so that a cost model's similarity term loads no model for texts
it has seen: ``nlqo plan`` on a known file answers at once, as a database's EXPLAIN does.

Only bundled embedders are kept: their weights are pinned by hash, so a text's vector never changes.
The model loads on the first text the cache does not hold. A cache that cannot be read or written
is only slower (the vectors are computed, as without it).

>>> import tempfile
>>> class Counting:
...     name, dim, texts = "toy", 2, []
...     def encode(self, texts, *, kind="query", progress=None):
...         self.texts += list(texts)
...         return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)
>>> inner = Counting()
>>> path = Path(tempfile.mkdtemp()) / "toy.sqlite"
>>> first = CachedEmbedder("toy", path, lambda: inner).encode(["ab", "c"])
>>> again = CachedEmbedder("toy", path, lambda: inner).encode(["c", "ab", "ab"])
>>> first.tolist(), again.tolist(), inner.texts
([[2.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [2.0, 1.0], [2.0, 1.0]], ['ab', 'c'])
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs
import numpy as np


@attrs.define(eq=False)
class CachedEmbedder:
    """An ``Embedder`` (:class:`nlqo.common.passages.Embedder`) that keeps each vector it computes in ``path``."""

    name: str
    path: Path
    load: Callable[[], Any] = attrs.field(repr=False)
    """Makes the embedder that computes what the cache does not hold (called at most once)."""
    _inner: Any = attrs.field(default=None, init=False, repr=False)
    _db: sqlite3.Connection | None = attrs.field(default=None, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @property
    def dim(self) -> int:
        return int(self._embedder().dim)

    def _embedder(self) -> Any:
        if self._inner is None:
            self._inner = self.load()
        return self._inner

    def _open(self) -> sqlite3.Connection | None:
        if self._db is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, timeout=10, check_same_thread=False)
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors (kind TEXT, text TEXT, vector BLOB, PRIMARY KEY (kind, text))"
                )
                self._db = db
            except sqlite3.Error:
                return None
        return self._db

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string; wrap it in a list")
        with self._lock:
            db, found = self._open(), {}
            if db is not None:
                try:
                    for text in set(texts):
                        row = db.execute(
                            "SELECT vector FROM vectors WHERE kind = ? AND text = ?", (kind, text)
                        ).fetchone()
                        if row is not None:
                            found[text] = np.frombuffer(row[0], dtype=np.float32)
                except sqlite3.Error:
                    found = {}
            missing = sorted({t for t in texts if t not in found})
            if missing:
                vectors = np.asarray(self._embedder().encode(missing, kind=kind, progress=progress), dtype=np.float32)
                found.update(zip(missing, vectors))
                if db is not None:
                    try:
                        with db:
                            db.executemany(
                                "INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                                [(kind, t, v.tobytes()) for t, v in zip(missing, vectors)],
                            )
                    except sqlite3.Error:
                        pass
            return np.stack([found[t] for t in texts]) if texts else np.zeros((0, 0), dtype=np.float32)

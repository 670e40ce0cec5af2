"""The lexical side of an index: a BM25 model (bm25s) over the same rows as the passage store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Sequence

import attrs

from nlqo.errors import IndexFileError
from nlqo.common.extras import need

DIRNAME = "bm25"
STOPWORDS = "en"


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """Lower-cased words of two or more characters, English stopwords removed.

    >>> tokenize(["The Eiffel Tower is in Paris."])
    [['eiffel', 'tower', 'paris']]
    """
    bm25s = need("bm25s", "index")

    return bm25s.tokenize(list(texts), stopwords=STOPWORDS, return_ids=False, show_progress=False)


def write_bm25(folder: Path, texts: Sequence[str]) -> None:
    """Index ``texts`` (row ``i`` is document ``i``) and save the model into ``folder``."""
    bm25s = need("bm25s", "index")

    model = bm25s.BM25()
    model.index(tokenize(texts), show_progress=False)
    model.save(str(folder), show_progress=False)


@attrs.define(eq=False)
class Bm25:
    """A loaded BM25 model; ``search`` is safe to call from several threads."""

    model: object = attrs.field(repr=False)
    count: int
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def open(cls, folder: Path, count: int) -> Bm25:
        bm25s = need("bm25s", "index")

        if not folder.is_dir():
            raise IndexFileError(f"{folder}: BM25 index is missing")
        try:
            model = bm25s.BM25.load(str(folder), show_progress=False)
        except (OSError, ValueError, KeyError) as exc:
            raise IndexFileError(f"{folder}: cannot load the BM25 index ({exc})") from exc
        return cls(model=model, count=count)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """(row, score) of the best ``k`` documents that share a term with ``query``, best first."""
        tokens = tokenize([query])[0]
        vocab = self.model.vocab_dict  # type: ignore[attr-defined]
        tokens = [t for t in tokens if t in vocab]
        k = min(k, self.count)
        if not tokens or k <= 0:
            return []
        with self._lock:
            docs, scores = self.model.retrieve([tokens], k=k, show_progress=False)  # type: ignore[attr-defined]
        return [(int(d), float(s)) for d, s in zip(docs[0], scores[0]) if s > 0]

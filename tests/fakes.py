"""Small deterministic stand-ins for the embedder and the retriever (unit tests only)."""

from __future__ import annotations

import re
import zlib

import numpy as np

from nlqo.passages import Hit, Passage


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class HashEmbedder:
    """Bag of words hashed into 256 dimensions, L2-normalised."""

    name, dim = "hash", 256

    def encode(self, texts, *, kind="query", progress=None):
        out = np.zeros((len(texts), self.dim), dtype="float32")
        for i, t in enumerate(texts):
            for w in words(t):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class KeywordRetriever:
    """Ranks passages by shared words with the query."""

    def __init__(self, passages: list[Passage]):
        self.passages = passages
        self.queries: list[str] = []

    def search(self, query, k=3):
        self.queries.append(query)
        q = set(words(query))
        scored = sorted(self.passages, key=lambda p: (-len(q & set(words(p.title + " " + p.text))), p.id))
        return [Hit(p, float(len(q & set(words(p.title + " " + p.text)))), r + 1) for r, p in enumerate(scored[:k])]


PASSAGES = [
    Passage("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg."),
    Passage("p2", "Steven Spielberg", "Steven Spielberg was born in Cincinnati, Ohio."),
    Passage("p3", "Ada Lovelace", "Ada Lovelace was born on 10 December 1815."),
    Passage("p4", "Charles Babbage", "Charles Babbage was born on 26 December 1791."),
    Passage("p5", "Cincinnati", "Cincinnati is a city in Ohio."),
]

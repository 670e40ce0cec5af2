"""Small deterministic stand-ins for the LLM, the embedder and the retriever (tests and examples)."""

from __future__ import annotations

import re
import zlib
from typing import Sequence

import numpy as np

from nlqo.config import default
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.common.passages import Hit, Passage

__all__ = ["PASSAGES", "HashEmbedder", "KeywordRetriever", "ScriptedLLM", "words"]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class HashEmbedder:
    """Bag of words hashed into 256 dimensions, L2-normalised."""

    name, dim = "hash", 256

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype="float32")
        for i, t in enumerate(texts):
            for w in words(t):
                out[i, zlib.crc32(w.encode()) % self.dim] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class KeywordRetriever:
    """Ranks passages by words shared with the query; records every query in ``queries``."""

    def __init__(self, passages: Sequence[Passage]):
        self.passages = list(passages)
        self.queries: list[str] = []

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        self.queries.append(query)
        q = set(words(query))

        def shared(p: Passage) -> int:
            return len(q & set(words(p.title + " " + p.text)))

        scored = sorted(self.passages, key=lambda p: (-shared(p), p.id))
        return [Hit(p, float(shared(p)), r + 1) for r, p in enumerate(scored[:k])]


PASSAGES = [
    Passage("p1", "Jaws (film)", "Jaws is a 1975 thriller film directed by Steven Spielberg."),
    Passage("p2", "Steven Spielberg", "Steven Spielberg was born in Cincinnati, Ohio."),
    Passage("p3", "Ada Lovelace", "Ada Lovelace was born on 10 December 1815."),
    Passage("p4", "Charles Babbage", "Charles Babbage was born on 26 December 1791."),
    Passage("p5", "Cincinnati", "Cincinnati is a city in Ohio."),
]

"""Passages, retrieval hits, and the interfaces the executor needs from retrieval."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import attrs
import numpy as np

from nlqo.config import default


@attrs.frozen
class Passage:
    id: str
    title: str
    text: str


@attrs.frozen
class Hit:
    """One retrieved passage with its score (higher is better) and 1-based rank."""

    passage: Passage
    score: float
    rank: int


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors, shape ``(len(texts), dim)``.

    ``kind`` is ``"query"`` or ``"passage"``; models that want e5-style prefixes add them.
    ``progress`` asks for a progress bar on long batches (an index build); embedders may ignore it.
    """

    name: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray: ...


@runtime_checkable
class Retriever(Protocol):
    """Top-k search over a passage collection."""

    def search(self, query: str, k: int = default("k")) -> list[Hit]: ...

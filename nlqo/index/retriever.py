"""``Retriever`` implementations over an ``Index``, one per search mode."""

from __future__ import annotations

import attrs

from typing import TYPE_CHECKING

from nlqo.config import default
from nlqo.index.fusion import HYBRID_DEPTH
from nlqo.common.passages import Hit, Retriever

if TYPE_CHECKING:
    from nlqo.index.search import Index


@attrs.define(eq=False)
class DenseRetriever:
    """Nearest passages by embedding similarity."""

    index: Index

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        return self.index.search(query, k)


@attrs.define(eq=False)
class Bm25Retriever:
    """Best passages by BM25 term matching."""

    index: Index

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        return self.index.bm25_search(query, k)


@attrs.define(eq=False)
class HybridRetriever:
    """Dense and BM25 rankings fused by reciprocal rank."""

    index: Index
    depth: int = HYBRID_DEPTH

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        return self.index.hybrid_search(query, k, depth=self.depth)


MODES: dict[str, type] = {"dense": DenseRetriever, "bm25": Bm25Retriever, "hybrid": HybridRetriever}


def make_retriever(index: Index, mode: str = default("retrieval")) -> Retriever:
    """The retriever for ``mode`` (a key of ``MODES``)."""
    try:
        return MODES[mode](index)
    except KeyError:
        raise ValueError(f"unknown retrieval mode {mode!r} (choose from {', '.join(MODES)})") from None

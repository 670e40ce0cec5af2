"""Passage indexes: build one from a corpus, open it, and search it dense, BM25 or hybrid.

Layout of an index folder: ``manifest.json``, ``passages.sqlite``, ``dense.faiss``, ``bm25/``.
"""

from __future__ import annotations

from pathlib import Path

from nlqo.config import default
from nlqo.index.build import BuildReport, build_index, passage_text
from nlqo.index.chunking import Chunking, chunk_text
from nlqo.index.corpus import Corpus, Fields
from nlqo.index.dense import KINDS, DenseParams
from nlqo.index.manifest import Manifest
from nlqo.index.retriever import MODES, Bm25Retriever, DenseRetriever, HybridRetriever, make_retriever
from nlqo.index.search import Index
from nlqo.common.passages import Embedder, Retriever

__all__ = [
    "KINDS",
    "MODES",
    "Bm25Retriever",
    "BuildReport",
    "Chunking",
    "Corpus",
    "DenseParams",
    "DenseRetriever",
    "Fields",
    "HybridRetriever",
    "Index",
    "Manifest",
    "build_index",
    "chunk_text",
    "make_retriever",
    "open_retriever",
    "passage_text",
]


def open_retriever(
    path: str | Path, mode: str = default("retrieval"), *, embedder: Embedder | str | None = None, verify: bool = True
) -> Retriever:
    """Open the index at ``path`` and return its ``Retriever`` for ``mode``."""
    return make_retriever(Index.open(path, embedder=embedder, verify=verify), mode)

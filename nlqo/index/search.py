"""``Index``: an opened index folder with dense, BM25 and hybrid (RRF) search."""

from __future__ import annotations

import threading
from pathlib import Path

import attrs

from nlqo.config import default
from nlqo.errors import IndexFileError
from nlqo.index import atomic, dense
from nlqo.index.bm25 import DIRNAME as BM25_DIR, Bm25
from nlqo.index.fusion import HYBRID_DEPTH, RRF_K, reciprocal_rank_fusion
from nlqo.index.manifest import FILENAME as MANIFEST, Manifest, rebuild_hint
from nlqo.index.store import FILENAME as STORE_FILE, PassageStore
from nlqo.common.passages import Embedder, Hit, Passage, Retriever
from nlqo.common.paths import FOLDER, NOTHING, found

"""How many candidates each side contributes to a hybrid search by default."""


@attrs.define(eq=False)
class Index:
    """A built index. Open it with ``Index.open(path)``; all searches are thread-safe."""

    path: Path
    manifest: Manifest
    store: PassageStore = attrs.field(repr=False)
    dense: object = attrs.field(repr=False)
    """The FAISS index."""
    bm25: Bm25 = attrs.field(repr=False)
    _embedder: Embedder | None = attrs.field(default=None, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @classmethod
    def open(cls, path: str | Path, *, embedder: Embedder | str | None = None, verify: bool = True) -> Index:
        """Open the index in folder ``path``.

        ``embedder``: an ``Embedder``, or a name to load, which must be the one the index was built
        with; ``None`` loads the manifest's embedder on the first dense search. ``verify`` checks
        the SHA-256 of every file (sizes are always checked).
        """
        path = Path(path)
        what = found(path)
        if what.startswith("nothing"):
            old = atomic.leftovers(path.absolute(), "old")
            hint = (
                f"an interrupted build left the previous index at {old[-1]} (rename it back, or rebuild)"
                if old
                else f"build one with: nlqo index SOURCE --out {path}"
            )
            why = "" if what == NOTHING else f" ({what.split(': ', 1)[-1]})"
            raise IndexFileError(f"{path}: no such index folder{why}; {hint}")
        if what != FOLDER:
            raise IndexFileError(f"{path}: expected an index folder written by 'nlqo index', found {what}")
        manifest = Manifest.read(path)
        manifest.verify(path, checksums=verify)
        if isinstance(embedder, str):
            _check_name(manifest, embedder, path)
            from nlqo.runtime.embed import SentenceEmbedder

            embedder = SentenceEmbedder.load(embedder, prefixes=(manifest.query_prefix, manifest.passage_prefix))
        if embedder is not None:
            check_embedder(manifest, embedder, path)
        try:
            params = dense.DenseParams(**manifest.faiss)
        except (TypeError, ValueError) as exc:
            raise IndexFileError(
                f"{path / MANIFEST}: bad FAISS parameters ({exc}); {rebuild_hint(path, manifest.source)}"
            ) from exc
        try:
            store = PassageStore.open(path / STORE_FILE)
            vectors = dense.open_dense(path / dense.FILENAME, params, manifest.dim, manifest.count)
            lexical = Bm25.open(path / BM25_DIR, manifest.count)
        except IndexFileError as exc:  # damaged in a way only --no-verify lets through
            raise IndexFileError(f"{exc}; the index is damaged, {rebuild_hint(path, manifest.source)}") from exc
        return cls(path=path, manifest=manifest, store=store, dense=vectors, bm25=lexical, embedder=embedder)

    def __len__(self) -> int:
        return self.manifest.count

    @property
    def embedder(self) -> Embedder:
        """The index's embedder, loaded on first use when ``open`` was not given one."""
        with self._lock:
            if self._embedder is None:
                from nlqo.runtime.embed import SentenceEmbedder

                loaded = SentenceEmbedder.load(
                    self.manifest.embedder, prefixes=(self.manifest.query_prefix, self.manifest.passage_prefix)
                )
                check_embedder(self.manifest, loaded, self.path)
                self._embedder = loaded
            return self._embedder

    def search(self, query: str, k: int = default("k")) -> list[Hit]:
        """Dense search: the ``k`` passages whose vectors are closest to the query's (cosine)."""
        return self._hits(self._dense_rows(query, k))

    def bm25_search(self, query: str, k: int = default("k")) -> list[Hit]:
        """Lexical search: the ``k`` best BM25 matches (fewer if fewer share a term)."""
        return self._hits(self.bm25.search(query, k))

    def hybrid_search(
        self, query: str, k: int = default("k"), *, depth: int = HYBRID_DEPTH, rrf_k: int = RRF_K
    ) -> list[Hit]:
        """Reciprocal rank fusion of the top ``max(depth, k)`` dense and BM25 results; score is the RRF score."""
        depth = max(depth, k)
        dense_rows = [row for row, _ in self._dense_rows(query, depth)]
        bm25_rows = [row for row, _ in self.bm25.search(query, depth)]
        return self._hits(reciprocal_rank_fusion([dense_rows, bm25_rows], k=rrf_k)[:k])

    def retriever(self, mode: str = default("retrieval")) -> Retriever:
        """A ``Retriever`` over this index: ``mode`` is ``dense``, ``bm25`` or ``hybrid``."""
        from nlqo.index.retriever import make_retriever

        return make_retriever(self, mode)

    def get(self, passage_id: str) -> Passage | None:
        """The passage with this id, or ``None``."""
        return self.store.get(passage_id)

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _dense_rows(self, query: str, k: int) -> list[tuple[int, float]]:
        vector = self.embedder.encode([query], kind="query", progress=False)
        return dense.search_dense(self.dense, vector, k)[0]

    def _hits(self, ranked: list[tuple[int, float]]) -> list[Hit]:
        passages = self.store.rows([row for row, _ in ranked])
        return [Hit(passage=p, score=score, rank=i) for i, (p, (_, score)) in enumerate(zip(passages, ranked), start=1)]


def check_embedder(manifest: Manifest, embedder: Embedder, path: Path | None = None) -> None:
    """Raise ``IndexFileError`` unless ``embedder`` is the one the index was built with (the message
    names the index folder ``path`` when given)."""
    where = f"{path}: " if path is not None else ""
    if embedder.name != manifest.embedder or embedder.dim != manifest.dim:
        raise IndexFileError(
            f"{where}this index was built with embedder {manifest.embedder!r} (dimension {manifest.dim}), "
            f"not {embedder.name!r} (dimension {embedder.dim}); use --embedder {manifest.embedder} or rebuild the index"
        )
    own = (getattr(embedder, "query_prefix", None), getattr(embedder, "passage_prefix", None))
    if None not in own and own != (manifest.query_prefix, manifest.passage_prefix):
        raise IndexFileError(
            f"{where}embedder {embedder.name!r} uses prefixes {own}, but the index was built with "
            f"{(manifest.query_prefix, manifest.passage_prefix)}"
        )


def _check_name(manifest: Manifest, name: str, path: Path) -> None:
    from nlqo.runtime.embed import canonical_name

    if canonical_name(name) != manifest.embedder:
        raise IndexFileError(
            f"{path}: this index was built with embedder {manifest.embedder!r}, not {name!r}; "
            f"use --embedder {manifest.embedder} or rebuild the index"
        )

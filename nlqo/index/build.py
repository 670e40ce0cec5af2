"""``build_index``: corpus -> passage store + FAISS index + BM25 index + manifest, atomically."""

from __future__ import annotations

import datetime
import shutil
import time
import warnings
from pathlib import Path
from typing import Iterable

import attrs

from nlqo._version import __version__
from nlqo.errors import CorpusError, IndexFileError, RepairWarning
from nlqo.index import atomic, bm25, dense, store
from nlqo.index.chunking import Chunking
from nlqo.index.corpus import Corpus, Fields
from nlqo.index.manifest import FILENAME as MANIFEST, FileEntry, Manifest, holding, is_nlqo_manifest
from nlqo.common.passages import Embedder, Passage
from nlqo.common.paths import FOLDER, NOTHING, found
from nlqo.common.storage import kept_index, writing


@attrs.frozen
class BuildReport:
    """What a build did."""

    path: Path
    manifest: Manifest
    skipped: tuple[CorpusError, ...]
    seconds: float

    @property
    def passages_per_second(self) -> float:
        return self.manifest.count / self.seconds if self.seconds > 0 else float("inf")


def passage_text(passage: Passage, embed_title: bool = True) -> str:
    """The text that is embedded and BM25-indexed for a passage.

    >>> passage_text(Passage(id="1", title="Paris", text="Capital of France."))
    'Paris\\nCapital of France.'
    """
    if embed_title and passage.title:
        return f"{passage.title}\n{passage.text}"
    return passage.text


def build_index(
    source: str | Path | Iterable[Passage],
    out_dir: str | Path,
    embedder: Embedder,
    *,
    kind: str = "flat",
    params: dense.DenseParams | None = None,
    fields: Fields = Fields(),
    chunking: Chunking = Chunking(),
    on_error: str = "fail",
    embed_title: bool = True,
    progress: bool | None = None,
) -> BuildReport:
    """Build an index of ``source`` in ``out_dir``, replacing any index there only once complete.

    ``source`` is a corpus path (see ``Corpus``) or an iterable of passages. ``params`` tunes the
    FAISS index (its ``kind`` wins over ``kind``). If the build fails or is killed, ``out_dir``
    keeps the index it held before; a write that fails (a full disk) raises ``WriteError``.
    """
    started = time.perf_counter()
    params = params or dense.DenseParams(kind=kind)
    target = Path(out_dir).absolute()
    _check_target(target)
    with writing(target.parent, f"nothing was changed in {target}"):
        target.parent.mkdir(parents=True, exist_ok=True)
        restored = atomic.recover(target)
        stale = atomic.remove_stale(target)
    kept = kept_index(target)
    if restored is not None:
        warnings.warn(
            f"{target}: put back the previous index, which an interrupted build had set aside at {restored}",
            RepairWarning,
            stacklevel=2,
        )
    for folder in stale:
        warnings.warn(f"removed {folder}, the unfinished index of a build that was killed", RepairWarning, stacklevel=2)

    corpus: Iterable[Passage]
    if isinstance(source, (str, Path)):
        corpus = Corpus(source, fields=fields, chunking=chunking, on_error=on_error)
        described = str(Path(source).absolute())
    else:
        corpus, described = source, "<passages>"
    with writing(target.parent, kept):
        tmp = atomic.temp_sibling(target)
    try:
        passages = list(corpus)
        if not passages:
            raise IndexFileError(f"{described}: no passages to index")
        with writing(tmp / store.FILENAME, kept):
            count = store.write_store(tmp / store.FILENAME, passages)
        texts = [passage_text(p, embed_title) for p in passages]
        vectors = embedder.encode(texts, kind="passage", progress=progress)
        if vectors.shape != (count, embedder.dim):
            raise IndexFileError(
                f"embedder {embedder.name!r} returned shape {vectors.shape}, expected {(count, embedder.dim)}"
            )
        params = params.resolved(count)
        built = dense.build_dense(vectors, params)
        with writing(tmp / dense.FILENAME, kept):
            dense.write_dense(built, tmp / dense.FILENAME)
        with writing(tmp / bm25.DIRNAME, kept):
            bm25.write_bm25(tmp / bm25.DIRNAME, texts)
        skipped = tuple(getattr(corpus, "skipped", ()))
        manifest = Manifest(
            embedder=embedder.name,
            dim=embedder.dim,
            count=count,
            kind=params.kind,
            source=described,
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            nlqo_version=__version__,
            files=tuple(FileEntry.of(tmp, rel) for rel in _files(tmp)),
            query_prefix=getattr(embedder, "query_prefix", ""),
            passage_prefix=getattr(embedder, "passage_prefix", ""),
            embed_title=embed_title,
            faiss=attrs.asdict(params),
            skipped=len(skipped),
        )
        with writing(tmp / MANIFEST, kept):
            (tmp / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
        with writing(target, kept):
            atomic.replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildReport(path=target, manifest=manifest, skipped=skipped, seconds=time.perf_counter() - started)


_LAYOUT = {MANIFEST, store.FILENAME, dense.FILENAME, bm25.DIRNAME}
"""What an index folder holds: a folder holding nothing else is an index, however damaged."""


def _check_target(target: Path) -> None:
    """Refuse to replace anything but an nlqo index (damaged or not: :data:`_LAYOUT`, or a manifest
    of nlqo's format) or an empty folder, and a path where no folder can be made."""
    what = found(target)
    if what == FOLDER:
        names = {p.name for p in target.iterdir()}
        if names and not names <= _LAYOUT and not is_nlqo_manifest(target / MANIFEST):
            raise IndexFileError(
                f"{target}: folder is not empty and holds no nlqo index ({holding(target)}); refusing to replace it"
            )
    elif what != NOTHING:
        raise IndexFileError(f"{target}: expected an index folder to create or replace, found {what}")


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())

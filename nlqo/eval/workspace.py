"""The index a bench run searches: built from a corpus into ``OUT/index`` (reused while it matches) or given."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nlqo.errors import IndexFileError, RepairWarning
from nlqo.index.manifest import REBUILD, sha256_file
from nlqo.index.search import Index
from nlqo.planner.statistics.store import index_digest
from nlqo.common.storage import writing

if TYPE_CHECKING:
    from nlqo.common.passages import Embedder

SOURCE = "index.source.json"
"""Beside ``OUT/index``: the corpus (path and SHA-256) and embedder the index was built from."""


def open_index(
    out: Path,
    *,
    corpus: str | None = None,
    index: str | None = None,
    embedder: str | None = None,
    progress: bool = True,
    cluster=None,
) -> tuple[Index, dict[str, Any]]:
    """The index to search and what identifies it in ``run.json``.

    With ``corpus``, ``out/index`` is reused when ``index.source.json`` names the same corpus bytes
    and embedder, and is (re)built otherwise. With ``index``, that folder is opened. With
    ``cluster`` (an :class:`nlqo.runtime.cluster.Connection`) a build embeds on its workers, and an index
    built from ``corpus`` is opened without loading its embedder here (the workers search it).
    """
    if index is not None:
        opened = Index.open(index, embedder=embedder)
        return opened, {
            "index": str(Path(index).absolute()),
            "index_digest": index_digest(opened.manifest),
            "corpus": opened.manifest.source,
        }
    if corpus is None:
        raise ValueError("open_index needs a corpus or an index")
    from nlqo.main.builder import load_embedder
    from nlqo.runtime.embed import DEFAULT_EMBEDDER, canonical_name
    from nlqo.index.build import build_index

    name = embedder or DEFAULT_EMBEDDER
    wanted = {
        "corpus": str(Path(corpus).absolute()),
        "corpus_sha256": sha256_file(Path(corpus)),
        "embedder": canonical_name(name),
    }
    folder, sidecar = out / "index", out / SOURCE
    if _recorded(sidecar) == wanted:
        try:
            return Index.open(folder, embedder=None if cluster else name), {**wanted, "index": str(folder.absolute())}
        except IndexFileError as exc:  # damaged or half-deleted: rebuild below
            damage = str(exc).split(REBUILD)[0].rstrip(" ,;")
            warnings.warn(f"{damage}; rebuilding {folder} from {corpus}", RepairWarning, stacklevel=2)
    with writing(sidecar, "nothing was run"):
        sidecar.unlink(missing_ok=True)
    loaded: Embedder
    if cluster is not None:
        from nlqo.index.distributed import ClusterEmbedder

        loaded = ClusterEmbedder.start(cluster, name)
    else:
        loaded = load_embedder(name)
    build_index(corpus, folder, loaded, progress=progress)
    with writing(sidecar, f"the index in {folder} is built and will be rebuilt next time"):
        sidecar.write_text(json.dumps(wanted, indent=2) + "\n", encoding="utf-8")
    return Index.open(folder, embedder=None if cluster else loaded), {**wanted, "index": str(folder.absolute())}


def _recorded(sidecar: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None

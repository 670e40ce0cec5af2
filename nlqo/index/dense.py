"""The dense side of an index: a FAISS inner-product index over L2-normalised vectors."""

from __future__ import annotations

import math
from pathlib import Path

from typing import Any

import attrs
import numpy as np

from nlqo.errors import IndexFileError
from nlqo.common.extras import need

FILENAME = "dense.faiss"
KINDS = ("flat", "hnsw", "ivf")


@attrs.frozen
class DenseParams:
    """How to build and search the FAISS index. Zero means "choose from the corpus size"."""

    kind: str = attrs.field(default="flat", validator=attrs.validators.in_(KINDS))
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int = 0
    """IVF cells; default about ``4 * sqrt(n)``, at most ``n / 39`` (FAISS's training minimum)."""
    nprobe: int = 0
    """IVF cells visited per query; default a quarter of ``nlist``, at least 8."""

    def resolved(self, n: int) -> DenseParams:
        """These parameters with the IVF defaults filled in for ``n`` vectors.

        >>> p = DenseParams(kind="ivf").resolved(2000)
        >>> p.nlist, p.nprobe
        (51, 12)
        """
        if self.kind != "ivf":
            return self
        nlist = self.nlist or max(1, min(round(4 * math.sqrt(n)), n // 39))
        nprobe = self.nprobe or min(nlist, max(8, nlist // 4))
        return attrs.evolve(self, nlist=nlist, nprobe=nprobe)


def build_dense(vectors: np.ndarray, params: DenseParams):
    """A FAISS index holding ``vectors`` as ids ``0..n-1`` (params must be ``resolved``)."""
    faiss = need("faiss", "index")

    n, dim = vectors.shape
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    index: Any
    if params.kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif params.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
    else:
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, params.nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
    index.add(vectors)
    return index


def write_dense(index, path: Path) -> None:
    """Write ``index`` to ``path`` through Python's file writes, so a full disk raises ``OSError``
    (FAISS's own file writer ignores a failed close and can leave a file cut short)."""
    faiss = need("faiss", "index")

    with open(path, "wb") as fh:
        faiss.write_index(index, faiss.PyCallbackIOWriter(fh.write))


def open_dense(path: Path, params: DenseParams, dim: int, count: int):
    """Read the FAISS index and set its search-time parameters."""
    faiss = need("faiss", "index")

    if not path.is_file():
        raise IndexFileError(f"{path}: dense index is missing")
    try:
        index: Any = faiss.read_index(str(path))
    except RuntimeError as exc:
        raise IndexFileError(f"{path}: cannot read the FAISS index ({exc})") from exc
    if index.d != dim or index.ntotal != count:
        raise IndexFileError(
            f"{path}: holds {index.ntotal} vectors of dimension {index.d}, the manifest says {count} of {dim}"
        )
    expected = {"hnsw": "hnsw", "ivf": "nprobe"}.get(params.kind)
    if expected is not None and not hasattr(index, expected):
        raise IndexFileError(
            f"{path}: holds a {type(index).__name__}, but the manifest says it is a {params.kind} index"
        )
    if params.kind == "hnsw":
        index.hnsw.efSearch = params.ef_search
    elif params.kind == "ivf":
        index.nprobe = params.nprobe
    return index


def search_dense(index, vectors: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
    """(row, inner product) of the ``k`` nearest vectors for each query vector, best first."""
    k = min(k, index.ntotal)
    if k <= 0:
        return [[] for _ in range(len(vectors))]
    scores, ids = index.search(np.ascontiguousarray(vectors, dtype=np.float32), k)
    return [
        [(int(i), float(s)) for i, s in zip(row_ids, row_scores) if i >= 0] for row_ids, row_scores in zip(ids, scores)
    ]

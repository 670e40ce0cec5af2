"""Embedding a corpus on Dask workers (``nlqo index --cluster``).

:class:`ClusterEmbedder` is an ``Embedder`` whose ``encode`` cuts the texts into chunks, embeds
each chunk on a worker (every worker loads the embedding model once, through a worker plugin) and
puts the vectors back in input order. Everything else about a build is unchanged:
:func:`nlqo.index.build.build_index` reads the corpus, writes the passage store, the FAISS and BM25
indexes and the manifest in this process and swaps the finished folder into place atomically.
A chunk whose worker dies is embedded again on another worker by the scheduler.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import threading
from typing import Any, Sequence

import attrs
import numpy as np
from distributed import WorkerPlugin

from nlqo.runtime.cluster import Connection, host_threads
from nlqo.errors import ClusterError, NlqoError


@attrs.frozen
class EmbedderRecipe:
    """Which embedding model workers load, and with how many torch threads."""

    name: str
    batch_size: int = 64
    threads: int | None = None
    """Torch threads per worker; None: the host's cores shared among its task threads."""
    host_threads: tuple[tuple[str, int], ...] = ()

    def plugin_name(self) -> str:
        digest = hashlib.sha256(json.dumps(attrs.asdict(self), sort_keys=True).encode()).hexdigest()
        return f"nlqo-embed-{digest[:16]}"


class LazyPlugin(WorkerPlugin):
    """Holds a recipe on every worker and what :meth:`build` makes of it, built on first use."""

    def __init__(self, recipe: Any):
        self.recipe = recipe
        self.name = recipe.plugin_name()
        self._built: Any = None
        self._lock: threading.Lock | None = None

    def setup(self, worker) -> None:
        self._lock = threading.Lock()

    def teardown(self, worker) -> None:
        self._built = None

    def build(self) -> Any:
        raise NotImplementedError

    def built(self) -> Any:
        assert self._lock is not None, "the plugin was not set up on a worker"
        with self._lock:
            if self._built is None:
                self._built = self.build()
            return self._built


def built(plugin: str) -> Any:
    """What the worker plugin called ``plugin`` built on this worker."""
    from distributed import get_worker

    return get_worker().plugins[plugin].built()


class EmbedderPlugin(LazyPlugin):
    """Holds the recipe on every worker and the model, loaded on first use."""

    def build(self) -> Any:
        import torch

        from nlqo.runtime.embed import SentenceEmbedder

        host = socket.gethostname()
        torch.set_num_threads(self.recipe.threads or dict(self.recipe.host_threads).get(host, 1))
        return SentenceEmbedder.load(self.recipe.name, batch_size=self.recipe.batch_size)


def describe(plugin: str) -> dict[str, Any]:
    """Task: load the model on this worker (and run it once: torch's first call is slow); its
    name, dimension and prefixes."""
    model = built(plugin)
    model.encode(["warm-up"], kind="passage", progress=False)
    return {
        "name": model.name,
        "dim": model.dim,
        "query_prefix": model.query_prefix,
        "passage_prefix": model.passage_prefix,
    }


def embed(plugin: str, texts: Sequence[str], kind: str) -> np.ndarray:
    """Task: vectors of one chunk of texts."""
    return built(plugin).encode(texts, kind=kind, progress=False)


def chunk_size(n: int, workers: int, batch_size: int) -> int:
    """Texts per task: about four tasks per worker (so a slow or lost worker delays little), whole
    batches, at most 2048 texts.

    >>> chunk_size(1969, 2, 64), chunk_size(100, 2, 64), chunk_size(10**6, 8, 64)
    (256, 64, 2048)
    """
    per_task = math.ceil(n / max(1, 4 * workers))
    return min(2048, max(batch_size, math.ceil(per_task / batch_size) * batch_size))


@attrs.define(eq=False)
class ClusterEmbedder:
    """An ``Embedder`` that embeds on a cluster's workers. Build it with :meth:`start`."""

    connection: Connection
    recipe: EmbedderRecipe
    name: str
    dim: int
    query_prefix: str = ""
    passage_prefix: str = ""

    @classmethod
    def start(
        cls, connection: Connection, name: str, *, batch_size: int = 64, threads: int | None = None
    ) -> ClusterEmbedder:
        """Hand every worker the model name and load it there (all workers at once)."""
        client, workers = connection.client, connection.workers
        recipe = EmbedderRecipe(
            name, batch_size=batch_size, threads=threads, host_threads=tuple(sorted(host_threads(workers).items()))
        )
        plugin = EmbedderPlugin(recipe)
        client.register_plugin(plugin)
        futures = [
            client.submit(describe, plugin.name, workers=[w.address], allow_other_workers=False, pure=False)
            for w in workers
        ]
        described = client.gather(futures)
        if any(d != described[0] for d in described):
            raise ClusterError(f"workers loaded different embedders for {name!r}: {described}")
        return cls(connection, recipe, **described[0])

    def encode(self, texts: Sequence[str], *, kind: str = "query", progress: bool | None = None) -> np.ndarray:
        """L2-normalised float32 vectors of ``texts``, in order, embedded on the workers."""
        from distributed import as_completed
        from tqdm.auto import tqdm

        if isinstance(texts, str):
            raise TypeError("encode() takes a sequence of texts, not a single string; wrap it in a list")
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        size = chunk_size(len(texts), len(self.connection.workers), self.recipe.batch_size)
        client, plugin = self.connection.client, self.recipe.plugin_name()
        starts = range(0, len(texts), size)
        futures = {client.submit(embed, plugin, texts[s : s + size], kind, pure=False): s for s in starts}
        show = len(texts) >= 512 if progress is None else progress
        try:
            with tqdm(
                total=len(texts),
                disable=not show,
                unit="text",
                desc=f"embedding ({self.name}) on {len(self.connection.workers)} workers",
            ) as bar:
                for future in as_completed(futures):
                    try:
                        vectors = future.result()
                    except NlqoError:
                        raise
                    except Exception as exc:  # KilledWorker, a lost scheduler
                        raise ClusterError(f"embedding on the cluster failed: {type(exc).__name__}: {exc}") from exc
                    start = futures[future]
                    out[start : start + len(vectors)] = vectors
                    bar.update(len(vectors))
        finally:
            client.cancel(list(futures))
        return out

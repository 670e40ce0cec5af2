"""Build the engine's parts from one :class:`~nlqo.config.EngineConfig`: the one place that loads
the LLM, opens the index, reads the cost model and rules, and assembles the optimizer
(:meth:`nlqo.Engine.from_config` puts the parts together).

The CLI commands (``plan``, ``ask``, ``explain``, ``bench``, ``parse``), the bench's strategies and
:meth:`nlqo.Engine.from_config` all come through here, so one option means the same everywhere.
Parts passed in (``llm=``, ``retriever=``, ``embedder=``) are used instead of loading them.

>>> from nlqo.config import EngineConfig
>>> build_optimizer(EngineConfig(cost_model="structural", budget=500)).budget
500
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nlqo.config import EngineConfig
from nlqo.errors import ConfigError, NlqoError
from nlqo.runtime.embed import DEFAULT_EMBEDDER
from nlqo.runtime.llm.backends import load_llm

if TYPE_CHECKING:
    from nlqo.optimizer.cost import CostModel
    from nlqo.runtime.llm.base import LLM
    from nlqo.optimizer.optimizer import Optimizer
    from nlqo.common.passages import Embedder, Retriever


def load_model(config: EngineConfig, *, progress: bool = True) -> "LLM":
    """The LLM ``config`` names (the only call of :func:`nlqo.runtime.llm.backends.load_llm`); ``progress``
    shows a local model's first verification as a bar."""
    if config.model is None:
        raise ConfigError("no model configured (EngineConfig.model is None)")
    return load_llm(
        config.model, runtime=config.runtime, quantize=config.quantize, threads=config.threads, progress=progress
    )


def load_cost(config: EngineConfig) -> "CostModel":
    from nlqo.optimizer.cost import load_cost_model

    model = load_cost_model(config.cost_model, path=config.path)
    return model.with_params(**config.param_dict) if config.params else model


def set_threads(threads: int | None) -> None:
    """Set torch's CPU thread count for this process (the embedder's; a local LLM's too), when given."""
    if threads:
        try:
            import torch
        except ImportError:  # no torch, no torch threads to set (llama.cpp takes its own)
            return
        torch.set_num_threads(threads)


def load_embedder(name: str) -> "Embedder":
    from nlqo.runtime.embed import SentenceEmbedder

    return SentenceEmbedder.load(name)


def similarity_embedder(name: str) -> "Embedder":
    """The embedder of a cost model's similarity term: a bundled one behind an on-disk vector cache
    (:mod:`nlqo.runtime.embed_cache`), so the model loads only for a text it has not seen; another as it is."""
    from nlqo.common.paths import cache_root
    from nlqo.runtime.embed import BUNDLED
    from nlqo.runtime.embed_cache import CachedEmbedder

    key = name.lower()
    if key not in BUNDLED:
        return load_embedder(name)
    return CachedEmbedder(key, cache_root() / "embeddings" / f"{key}.sqlite", lambda: load_embedder(key))


def build_optimizer(
    config: EngineConfig, *, llm: "LLM | None" = None, embedder: "Embedder | None" = None
) -> "Optimizer":
    """The optimizer ``config`` describes; ``llm`` is asked about undecided atom pairs.

    An embedder (``config.embedder``, default all-minilm-l6-v2) is made only when the cost model
    uses ``similarity`` and none is passed (:func:`similarity_embedder`).
    """
    from nlqo.optimizer.optimizer import Optimizer
    from nlqo.optimizer.relations import RelationCache
    from nlqo.optimizer.rewrite import load_rules

    model = load_cost(config)
    if "similarity" in model.names and embedder is None:
        embedder = similarity_embedder(config.embedder or DEFAULT_EMBEDDER)
    cache = None
    if config.relation_cache:
        cache = RelationCache.open(config.relations_cache) if config.relations_cache is not None else RelationCache()
    rules = () if config.rules == "none" else load_rules(config.rules, config.path)
    return Optimizer(
        cost_model=model,
        embedder=embedder if "similarity" in model.names else None,
        llm=llm,
        cache=cache,
        rules=rules,
        budget=config.budget,
        beam=config.beam,
        context_merge=config.context_merge and llm is not None,
        max_atoms=config.max_atoms,
        constrained=config.constrained,
    )


def open_retrieval(config: EngineConfig, *, embedder: "Embedder | None" = None) -> tuple["Retriever", "Embedder"]:
    """The retriever and embedder of ``config.index``."""
    from nlqo.index import Index

    if config.index is None:
        raise ConfigError("answering needs an index: set EngineConfig.index (nlqo ask --index DIR)")
    index = Index.open(config.index, embedder=config.embedder)
    return index.retriever(config.retrieval), embedder or index.embedder


def engine_identity(config: EngineConfig) -> dict:
    """What statistics must have been measured on to serve this config: model, runtime, k,
    retrieval mode and, when the config names an index, its embedder and digest."""
    identity: dict = {"model": config.model, "runtime": config.runtime, "k": config.k, "retrieval": config.retrieval}
    if config.compress:  # statistics of whole passages do not describe compressed ones
        identity["compress"] = config.compress
    if config.index is not None:
        from nlqo.index.manifest import Manifest
        from nlqo.planner.statistics.store import index_digest

        try:
            manifest = Manifest.read(config.index)
        except (OSError, ValueError, NlqoError):
            return identity
        identity.update(embedder=manifest.embedder, index_digest=index_digest(manifest))
    return identity


def load_statistics(config: EngineConfig, identity: dict):
    """The statistics ``auto`` chooses by: ``config.statistics``, else the file beside the index
    (each refused when measured on another setup), else the bundled defaults."""
    from nlqo.planner.statistics import store

    if config.statistics is not None:
        return store.check(store.load(config.statistics), identity)
    return store.for_index(config.index, identity)


def load_calibration(config: EngineConfig, identity: dict):
    """The statistics a forced cascade escalates by (their calibration): those :func:`load_statistics`
    finds, or None when they were measured on another setup (the cascade then decides by support, as
    a forced strategy reads no statistics it cannot use); an unreadable file is still an error."""
    from nlqo.planner.statistics import store

    if config.statistics is not None:
        stats = store.load(config.statistics)
    elif config.index is not None and (Path(config.index) / store.FILENAME).is_file():
        stats = store.load(Path(config.index) / store.FILENAME)
    else:
        stats = store.load(store.BUNDLED, bundled=True)
    return None if store.differences(stats, identity) else stats

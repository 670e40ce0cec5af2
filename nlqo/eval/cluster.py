"""``nlqo bench --cluster``: the questions of a bench run sharded over Dask workers.

The client (the ``nlqo bench`` process) keeps all of today's bookkeeping: it writes ``run.json``,
reads the records already written, sends each question still missing a strategy to the cluster as
one task, and appends a task's records to ``records.jsonl`` when the task comes back. Workers never
write records. A worker that dies mid-question loses that question's unfinished work only; the
scheduler runs the task again on another worker, and its records reach the file once, when a run
of it finishes. If the client itself stops, the records it appended are kept and running the same
command again resumes after them, exactly as without a cluster.

Each worker builds the model, the index and the strategies once, on its first task, from a
:class:`Recipe` (names and paths, no loaded objects) held by a worker plugin; a worker that
replaces a dead one gets the plugin from the scheduler and builds them again.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path
from typing import Any, Iterator, Mapping

import attrs

from nlqo.runtime.cluster import Connection, host_threads
from nlqo.config import EngineConfig, default
from nlqo.errors import ClusterError, ConfigError, IndexFileError, NlqoError
from nlqo.eval.datasets import Question
from nlqo.eval.runner import Bench, run_record
from nlqo.index.distributed import LazyPlugin, built


@attrs.frozen
class Recipe:
    """How a worker builds what a bench run needs: the same choices ``nlqo bench`` makes in one process."""

    config: EngineConfig
    """The run's engine options (model, runtime, planning), as :func:`nlqo.cli.bench.bench_config`
    makes them; ``config.threads`` None: the worker's host cores shared among its task threads
    (``host_threads``)."""
    index: str
    """Absolute path of the index folder; workers must see it (a shared filesystem on a real cluster)."""
    index_digest: str
    """:func:`nlqo.planner.statistics.store.index_digest` of the index the client opened; workers check theirs."""
    strategies: tuple[str, ...]
    embedder: str | None = None
    """Embedder for the index's queries (``--embedder``); None: the index's own."""
    host_threads: tuple[tuple[str, int], ...] = ()
    retrieval: str = default("retrieval")
    k: int = default("k")
    llm_cache: str | None = None
    judge: str | None = None

    def plugin_name(self) -> str:
        """The worker plugin's name: one per recipe, so two runs on one cluster do not mix.

        >>> Recipe(EngineConfig(model="m"), "/idx", "d", ("no-rag",)).plugin_name()[:11]
        'nlqo-bench-'
        """
        digest = hashlib.sha256(json.dumps(attrs.asdict(self), sort_keys=True, default=str).encode()).hexdigest()
        return f"nlqo-bench-{digest[:16]}"

    def threads_on(self, host: str) -> int:
        return self.config.threads or dict(self.host_threads).get(host, 1)


def portable(config: EngineConfig) -> EngineConfig:
    """``config`` with its file paths made absolute, so that workers in other folders (or on other
    machines with a shared filesystem) read the same files.

    >>> portable(EngineConfig(relations_cache="r.json", path=("rules",))).relations_cache.is_absolute()
    True
    """
    return attrs.evolve(
        config,
        index=None if config.index is None else config.index.absolute(),
        relations_cache=None if config.relations_cache is None else config.relations_cache.absolute(),
        path=tuple(str(Path(p).absolute()) for p in config.path),
    )


@attrs.define(eq=False)
class Loaded:
    """What one worker built from a recipe."""

    strategies: Mapping[str, Any]
    judge: Any
    about: Mapping[str, Any]
    """The runtime and threads of the model and the judge's name, as ``run.json`` records them."""


def load(recipe: Recipe, host: str) -> Loaded:
    """Open the index, load the model (and judge) and build the strategies, as ``nlqo bench`` does."""
    from nlqo.main.builder import load_model
    from nlqo.eval.strategy import build_strategies
    from nlqo.eval.judge import LLMJudge
    from nlqo.planner.statistics.store import index_digest
    from nlqo.index.search import Index
    from nlqo.runtime.llm.backends import runtime_of
    from nlqo.runtime.llm.cache import with_cache

    index = Index.open(recipe.index, embedder=recipe.embedder)
    if index_digest(index.manifest) != recipe.index_digest:
        raise IndexFileError(
            f"{host}: the index at {recipe.index} is not the one the client opened; workers need the same files (a shared filesystem)"
        )
    threads = recipe.threads_on(host)
    config = attrs.evolve(recipe.config, threads=threads)
    backend = load_model(config)
    index.embedder  # noqa: B018 - load the embedder now, not in the first question's timing
    llm = with_cache(backend, recipe.llm_cache)
    strategies = build_strategies(recipe.strategies, llm, index, retrieval=recipe.retrieval, k=recipe.k, config=config)
    judge = (
        LLMJudge(with_cache(load_model(attrs.evolve(config, model=recipe.judge)), recipe.llm_cache))
        if recipe.judge
        else None
    )
    about = {
        "runtime": runtime_of(backend),
        "threads": getattr(backend, "threads", threads),
        "judge": judge.name if judge else None,
    }
    return Loaded(strategies, judge, about)


class BenchPlugin(LazyPlugin):
    """Holds a recipe on every worker and what it built, built on first use."""

    def build(self) -> Loaded:
        return load(self.recipe, socket.gethostname())


def warm(plugin: str) -> Mapping[str, Any]:
    """Task: build what the recipe names on this worker; say which runtime and threads it got."""
    return built(plugin).about


def answer(plugin: str, question: Question, index: int, names: tuple[str, ...], yes_no: bool) -> list[dict[str, Any]]:
    """Task: run strategies ``names`` on one question; their records, in that order."""
    loaded = built(plugin)
    return [run_record(loaded.strategies[n], question, index, n, yes_no=yes_no, judge=loaded.judge) for n in names]


@attrs.define(eq=False)
class ClusterRun:
    """A bench run's executor on a cluster (``Bench(executor=...)``). Build it with :meth:`start`."""

    connection: Connection
    recipe: Recipe
    about: Mapping[str, Mapping[str, Any]]
    """Per worker address: what :func:`warm` returned."""

    @classmethod
    def start(cls, connection: Connection, recipe: Recipe) -> ClusterRun:
        """Hand every worker the recipe and build it there (all workers at once)."""
        client, workers = connection.client, connection.workers
        recipe = attrs.evolve(
            recipe, config=portable(recipe.config), host_threads=tuple(sorted(host_threads(workers).items()))
        )
        plugin = BenchPlugin(recipe)
        client.register_plugin(plugin)
        futures = [
            client.submit(warm, plugin.name, workers=[w.address], allow_other_workers=False, pure=False)
            for w in workers
        ]
        about = dict(zip((w.address for w in workers), client.gather(futures)))
        if len({a["runtime"] for a in about.values()}) > 1:
            raise ConfigError(f"workers run the model on different runtimes: {about}")
        return cls(connection, recipe, about)

    @property
    def client(self):
        return self.connection.client

    @property
    def plugin(self) -> str:
        return self.recipe.plugin_name()

    def meta(self) -> dict[str, Any]:
        """``run.json`` fields: runtime, threads and judge (as one process would record them) and the cluster."""
        first = next(iter(self.about.values()))
        workers = self.connection.workers
        return {
            "runtime": first["runtime"],
            "threads": first["threads"],
            "judge": first["judge"],
            "cluster": {
                "spec": str(self.connection.spec),
                "workers": len(workers),
                "task_threads": sum(w.nthreads for w in workers),
                "hosts": sorted({w.host for w in workers}),
                "model_threads": {a: v["threads"] for a, v in self.about.items()},
            },
        }

    def __call__(self, bench: Bench, todo: list[tuple[int, str]]) -> Iterator[list[dict[str, Any]]]:
        """One task per question (its missing strategies in ``todo`` order); records as tasks finish."""
        from distributed import as_completed

        groups: dict[int, list[str]] = {}
        for index, name in todo:
            groups.setdefault(index, []).append(name)
        futures = []
        for index, names in groups.items():
            question = bench.questions.questions[index]
            futures.append(
                self.client.submit(
                    answer, self.plugin, question, index, tuple(names), bench.yes_no(question), pure=False
                )
            )
        try:
            for future in as_completed(futures):
                try:
                    records = future.result()
                except NlqoError:
                    raise
                except Exception as exc:  # KilledWorker, a lost scheduler, a bug on a worker
                    raise ClusterError(
                        f"{type(exc).__name__}: {exc}; the records written so far are kept: run the same command again to resume"
                    ) from exc
                yield records
        finally:
            self.client.cancel(futures)

"""The engine's strategies in the shape the benchmark harness builds them.

:func:`build` takes ``(mode, llm, retriever, *, embedder, k, config=None, **options)`` and returns an
object with ``name`` and ``run(question, trace=None) -> RunResult``; ``mode`` is ``auto`` or any
operator of :data:`nlqo.execution.operators.OPERATORS`, so a new operator needs nothing here. The engine is built by
:meth:`nlqo.Engine.from_config` from ``config`` (default :class:`~nlqo.config.EngineConfig`)
changed by the options, which are config fields (``tau``, ``max_hops``, ``kv_reuse``,
``parallel``, ``workers``, ``relation_cache``, ``ir_cleanup``, ``plan_hints``,
``guard_rewrites``, ``constrained``, ``cost_model``, ...) or ``alpha`` (the cost model's similarity scale).
``auto`` measures the backend's per-token costs once, when built, as ``nlqo ask --strategy auto`` does.
"""

from __future__ import annotations

from typing import Any

import attrs

from nlqo.config import EngineConfig, default
from nlqo.kinds import AUTO
from nlqo.main.engine import Engine
from nlqo.execution.trace import RunResult, Trace
from nlqo.runtime.llm.base import LLM
from nlqo.common.passages import Embedder, Retriever


@attrs.define(eq=False)
class EngineStrategy:
    name: str
    engine: Engine
    mode: str

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        return self.engine.ask(question, strategy=self.mode, trace=trace)


def build(
    mode: str,
    llm: LLM,
    retriever: Retriever,
    *,
    embedder: Embedder | None = None,
    k: int = default("k"),
    name: str | None = None,
    config: EngineConfig | None = None,
    **options: Any,
) -> EngineStrategy:
    """The engine with ``--strategy mode`` (``auto`` or any registered operator)."""
    base = config if config is not None else EngineConfig()
    chosen = base.with_options(k=k, strategy=mode, measure_costs=mode == AUTO, **options)
    engine = Engine.from_config(chosen, llm=llm, retriever=retriever, embedder=embedder)
    return EngineStrategy(name=name or mode, engine=engine, mode=mode)

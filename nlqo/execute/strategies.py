"""The engine's strategies in the shape the benchmark harness builds them.

Each builder takes ``(llm, retriever, *, embedder, k, **options)`` and returns an object with
``name`` and ``run(question, trace=None) -> RunResult``. Options: ``tau``, ``max_hops``,
``kv_reuse``, ``parallel``, ``workers``, ``alpha`` (similarity scale of the default cost model),
``relation_cache`` (bool: keep LLM answers about atom pairs across questions), ``ir_cleanup``,
``plan_hints``, ``guard_rewrites`` and ``constrained`` (bools, as ``Engine.create`` takes them;
``constrained`` also constrains the optimizer's relation calls). ``auto`` measures
the backend's per-token costs once, when built, as ``nlqo ask --strategy auto`` does.
"""

from __future__ import annotations

from typing import Any

import attrs

from nlqo.execute.engine import Engine
from nlqo.execute.trace import RunResult, Trace
from nlqo.llm.base import LLM
from nlqo.passages import Embedder, Retriever


@attrs.define(eq=False)
class EngineStrategy:
    name: str
    engine: Engine
    mode: str

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        return self.engine.ask(question, strategy=self.mode, trace=trace)


def _engine(llm: LLM, retriever: Retriever, embedder: Embedder, k: int, options: dict[str, Any], *, measure: bool = False) -> Engine:
    from nlqo.cost import load_cost_model
    from nlqo.optimizer import Optimizer
    from nlqo.relations import RelationCache

    model = load_cost_model("default")
    if "alpha" in options:
        model = model.with_params(alpha=float(options.pop("alpha")))
    cache = RelationCache() if options.pop("relation_cache", True) else None
    optimizer = Optimizer(cost_model=model, embedder=embedder, llm=llm, cache=cache, constrained=options.get("constrained", True))
    return Engine.create(llm, retriever, embedder, optimizer=optimizer, k=k, measure_costs=measure, **options)


def _builder(mode: str):
    def build(llm: LLM, retriever: Retriever, *, embedder: Embedder, k: int = 3, name: str | None = None, **options: Any) -> EngineStrategy:
        engine = _engine(llm, retriever, embedder, k, dict(options), measure=mode == "auto")
        return EngineStrategy(name=name or mode, engine=engine, mode=mode)

    build.__name__ = mode
    build.__doc__ = f"The engine with --strategy {mode}."
    return build


linear = _builder("linear")
tree = _builder("tree")
auto = _builder("auto")

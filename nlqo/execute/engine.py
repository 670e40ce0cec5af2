"""The engine: question -> IR -> logical plan -> physical plan -> answer, with a full trace."""

from __future__ import annotations

import time

import attrs

from nlqo.errors import ParseFailure
from nlqo.execute.linear import LinearExecutor
from nlqo.execute.lower import BackendProfile, PhysicalPlan, lower
from nlqo.execute.trace import PARSE_FAILED, RunResult, Step, Trace
from nlqo.execute.tree import TreeExecutor
from nlqo.llm.base import LLM
from nlqo.optimizer import Optimizer
from nlqo.ir import Query
from nlqo.ir_grammar import MAX_ATOMS
from nlqo.parser import parse_question
from nlqo.passages import Embedder, Retriever
from nlqo.plan import Plan

STRATEGIES = ("auto", "linear", "tree")


@attrs.frozen
class Planned:
    plan: Plan | None
    physical: PhysicalPlan | None
    planning_ms: float
    error: str | None = None


@attrs.define(eq=False)
class Engine:
    """Answers questions over one retriever with one LLM. Build once, ask many times."""

    llm: LLM
    retriever: Retriever
    embedder: Embedder
    optimizer: Optimizer
    linear: LinearExecutor
    tree: TreeExecutor
    profile: BackendProfile = BackendProfile()
    k: int = 3
    ir_cleanup: bool = False
    """Parse with ``cleanup`` (``nlqo.parser.tidy``): unquote quoted variables, drop repeated atom lines and a cut-off last line."""
    plan_hints: bool = True
    """A plan lowered to the linear template shows its atoms to the template as plan-step hints."""
    constrained: bool = True
    """Parse under the IR's generation grammar where the LLM can apply one (``nlqo.parser``)."""
    max_atoms: int = MAX_ATOMS
    """Atoms a constrained parse may write."""

    @classmethod
    def create(
        cls,
        llm: LLM,
        retriever: Retriever,
        embedder: Embedder,
        *,
        optimizer: Optimizer | None = None,
        k: int = 3,
        tau: float = 0.85,
        max_hops: int = 10,
        kv_reuse: bool = True,
        parallel: bool = True,
        workers: int | None = None,
        profile: BackendProfile | None = None,
        measure_costs: bool = False,
        ir_cleanup: bool = False,
        plan_hints: bool = True,
        guard_rewrites: bool = False,
        constrained: bool = True,
        max_atoms: int = MAX_ATOMS,
    ) -> "Engine":
        """An engine with default parts; ``measure_costs`` times the backend's per-token costs once
        (a few short generations) so that ``auto`` lowers on measured rather than default costs."""
        from nlqo.cost import load_cost_model
        from nlqo.execute.lower import measure_profile

        optimizer = optimizer or Optimizer(cost_model=load_cost_model("default"), embedder=embedder, llm=llm)
        if profile is None:
            profile = BackendProfile(kv_reuse=kv_reuse and hasattr(llm, "session"), concurrency=getattr(llm, "concurrency", 1))
            if measure_costs:
                profile = measure_profile(llm, profile)
        return cls(
            llm=llm,
            retriever=retriever,
            embedder=embedder,
            optimizer=optimizer,
            linear=LinearExecutor(llm, retriever, embedder, k=k, tau=tau, max_hops=max_hops, kv_reuse=kv_reuse),
            tree=TreeExecutor(llm, retriever, k=k, workers=workers, parallel=parallel, guard_rewrites=guard_rewrites),
            profile=profile,
            k=k,
            ir_cleanup=ir_cleanup,
            plan_hints=plan_hints,
            constrained=constrained,
            max_atoms=max_atoms,
        )

    def plan(self, question: str, *, strategy: str = "auto", trace: Trace | None = None) -> Planned:
        """Parse and optimise; lower unless the strategy needs no plan. Parse failures are reported, not raised."""
        trace = trace or Trace()
        started = time.perf_counter()
        at = trace.now_ms()
        try:
            parsed = parse_question(question, self.llm, cleanup=self.ir_cleanup, constrained=self.constrained, max_atoms=self.max_atoms)
        except ParseFailure as exc:
            trace.record(Step(node="parse", kind="llm", text=str(exc), started_ms=at, note="no valid IR: the linear template runs instead"))
            return Planned(None, None, (time.perf_counter() - started) * 1000, error=str(exc))
        trace.record(Step.llm("parse", parsed.usage, parsed.text, at, note=parsed.describe()))
        planned = self.plan_query(parsed.query, strategy=strategy, trace=trace)
        plan = attrs.evolve(planned.plan, warnings=parsed.warnings + planned.plan.warnings)
        return attrs.evolve(planned, plan=plan, physical=attrs.evolve(planned.physical, logical=plan), planning_ms=(time.perf_counter() - started) * 1000)

    def plan_query(self, query: Query, *, strategy: str = "auto", trace: Trace | None = None) -> Planned:
        """Optimise and lower an already parsed query (a hand-written IR file, say)."""
        trace = trace or Trace()
        started = time.perf_counter()
        at = trace.now_ms()
        plan = self.optimizer.optimize(query)
        if plan.stats.llm_calls:
            trace.record(Step(node="relations", kind="llm", text=f"{plan.stats.llm_calls} relation calls", started_ms=at))
        physical = lower(plan, self.profile, k=self.k, force=None if strategy == "auto" else strategy)
        return Planned(plan, physical, (time.perf_counter() - started) * 1000)

    def ask(self, question: str, *, strategy: str = "auto", trace: Trace | None = None) -> RunResult:
        """Answer ``question``: ``linear`` runs the template directly; ``tree`` and ``auto`` plan first."""
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
        trace = trace or Trace()
        if strategy == "linear":
            return self.linear.run(question, trace=trace, strategy="linear")
        return self.execute(question, self.plan(question, strategy=strategy, trace=trace), strategy=strategy, trace=trace)

    def execute(self, question: str, planned: Planned, *, strategy: str = "auto", trace: Trace | None = None) -> RunResult:
        """Run a planned question on its physical operator (the template when there is no plan)."""
        trace = trace or Trace()
        if planned.physical is None:  # the question could not be parsed: the template needs no plan
            result = self.linear.run(question, trace=trace, strategy=strategy)
            return attrs.evolve(result, planning_ms=planned.planning_ms, stop_reason=f"{PARSE_FAILED}; {result.stop_reason}")
        physical = planned.physical
        if physical.operator == "tree":
            result = self.tree.run(physical.logical, trace=trace, strategy=strategy)
        else:
            hints = physical.hints if self.plan_hints else ()
            result = self.linear.run(question, hints=hints, trace=trace, strategy=strategy)
        return attrs.evolve(result, question=question, planning_ms=planned.planning_ms, plan=physical.logical, physical=physical)


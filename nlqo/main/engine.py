"""The engine: question -> IR -> logical plan -> physical plan -> answer, with a full trace."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor

import attrs

from nlqo.config import STRATEGIES, EngineConfig
from nlqo.errors import ParseFailure
from nlqo.execution.choice import held_to_options
from nlqo.parser.questions import check_question
from nlqo.runtime.embed import DEFAULT_EMBEDDER
from nlqo.execution.fallback import answer_or_fallback
from nlqo.execution.physical import BackendProfile, PhysicalPlan
from nlqo.planner.lower import lower
from nlqo.execution.trace import PARSE_FAILED, RunResult, Step, Trace
from nlqo.runtime.llm.base import LLM
from nlqo.optimizer.optimizer import Optimizer
from nlqo.parser.parse import parse_configured
from nlqo.ir import Atom, Const, Query, Var
from nlqo.kinds import AUTO, Operator, Policy, stop_reasons
from nlqo.execution.operators import OPERATORS
from nlqo.execution.operators.base import PLANNED
from nlqo.execution.operators.retrieve import RETRIEVE
from nlqo.execution.operators.template import TEMPLATE
from nlqo.parser.questions import question_class
from nlqo.planner.statistics.candidates import measured_candidate
from nlqo.planner.statistics.policy import Candidate, Choice, choose
from nlqo.planner.statistics.calibration import Trust
from nlqo.planner.statistics.store import Statistics, differences
from nlqo.common.passages import Embedder, Retriever
from nlqo.optimizer.plan import Plan


@attrs.frozen
class Planned:
    plan: Plan | None
    physical: PhysicalPlan | None
    planning_ms: float
    error: str | None = None


@attrs.define(eq=False)
class Engine:
    """Answers questions over one retriever with one LLM. Build once (:meth:`from_config`), ask many times.

    >>> from nlqo import Engine, EngineConfig
    >>> from nlqo.testing import PASSAGES, HashEmbedder, KeywordRetriever, ScriptedLLM
    >>> llm = ScriptedLLM([
    ...     ("nlqo IR", 'q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer ?city'),
    ...     ("", "Cincinnati"),
    ... ])
    >>> config = EngineConfig(cost_model="structural", strategy="tree", measure_costs=False)
    >>> engine = Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())
    >>> planned = engine.plan("In which city was the director of Jaws born?")
    >>> dict(planned.plan.tree.parent), planned.physical.operator
    ({'q1': 'q2', 'q2': '$root'}, <Operator.TREE: 'tree'>)
    >>> engine.ask("In which city was the director of Jaws born?").answer
    'Cincinnati'
    """

    llm: LLM
    retriever: Retriever
    embedder: Embedder
    optimizer: Optimizer
    profile: BackendProfile = BackendProfile()
    config: EngineConfig = EngineConfig()
    statistics: Statistics | None = None
    """Operator statistics ``auto`` chooses by (``nlqo analyze``; else the bundled defaults); their
    calibration is what the cascade escalates by (:attr:`calibration`)."""
    identity: dict = attrs.field(factory=dict)
    """What this engine runs on (model, runtime, embedder, k, retrieval, index digest), as statistics record it."""
    owned: tuple = attrs.field(default=(), repr=False)
    """The parts :meth:`from_config` loaded itself (not those passed in); :meth:`close` frees them."""
    states: dict = attrs.field(factory=dict, repr=False)
    """What each operator keeps across questions (:meth:`state`)."""
    """What the engine was built from; ``k``, ``strategy``, ``ir_cleanup``, ``plan_hints``, how to
    parse (``repairs``, ``constrained``, ``parse_atoms``, ``anchored``, ``span_constants``, ``anchor_repairs``) and the limits are read from it."""

    @classmethod
    def from_config(
        cls,
        config: EngineConfig,
        *,
        llm: LLM | None = None,
        retriever: Retriever | None = None,
        embedder: Embedder | None = None,
        profile: BackendProfile | None = None,
        progress: bool = False,
    ) -> "Engine":
        """The engine ``config`` describes, its parts loaded by :mod:`nlqo.main.builder`; parts passed in
        are used instead of loading them; ``progress`` says each load on standard error."""
        from nlqo.index.compress import compressing
        from nlqo.main import builder
        from nlqo.planner.profiles import cached_profile
        from nlqo.runtime.llm.backends import runtime_of
        from nlqo.runtime.llm.base import capabilities, close_part

        def say(message: str) -> None:
            if progress:
                print(f"nlqo: {message}", file=sys.stderr, flush=True)

        builder.set_threads(config.threads)
        owned: list = []
        loading = None
        if llm is None:  # in a thread, beside the embedder's load: llama.cpp loads without holding the GIL
            say(f"loading {config.model} ...")
            loader = ThreadPoolExecutor(1, thread_name_prefix="nlqo-load")
            loading = loader.submit(builder.load_model, config, progress=progress)
            loader.shutdown(wait=False)
        try:
            if retriever is None:
                say(f"opening index {config.index} ...")
                retriever, embedder = builder.open_retrieval(config, embedder=embedder)
                owned.append(retriever)
            if embedder is None:
                embedder = builder.load_embedder(config.embedder or DEFAULT_EMBEDDER)
        except BaseException:
            if loading is not None:  # the model is not wanted: freed once loaded
                loading.add_done_callback(lambda done: None if done.exception() else close_part(done.result()))
            raise
        retriever = compressing(retriever, embedder, config.compress)
        if loading is not None:
            llm = loading.result()  # raises the load's error, if it failed
            owned.append(llm)
        assert llm is not None
        optimizer = builder.build_optimizer(config, llm=llm, embedder=embedder)
        identity = {**builder.engine_identity(config), "runtime": runtime_of(llm)}
        chooses = config.strategy == AUTO and config.policy != "structural"
        statistics = builder.load_statistics(config, identity) if chooses else None
        if config.strategy == Operator.CASCADE:  # a forced cascade escalates by their calibration, if it fits
            statistics = builder.load_calibration(config, identity)
        if profile is None:
            caps = capabilities(llm)
            profile = BackendProfile(kv_reuse=config.kv_reuse and caps.session, concurrency=caps.concurrency)
            measure = config.measure_costs if config.measure_costs is not None else config.strategy == AUTO
            if measure:
                profile, _ = cached_profile(
                    llm,
                    profile,
                    before_measuring=lambda: say(
                        "measuring the backend's per-token costs for the cost-based lowering (once per model and machine) ..."
                    ),
                )
        return cls(
            llm=llm,
            retriever=retriever,
            embedder=embedder,
            optimizer=optimizer,
            profile=profile,
            config=config,
            statistics=statistics,
            identity=identity,
            owned=tuple(owned),
        )

    def close(self) -> None:
        """Free the model and index this engine loaded (a llama.cpp context is about 1 GB); parts
        passed to :meth:`from_config` belong to the caller and stay open."""
        from nlqo.runtime.llm.base import close_part

        for part in self.owned:
            close_part(part)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def k(self) -> int:
        return self.config.k

    @property
    def calibration(self) -> Trust | None:
        """What a cascade escalates by (:class:`~nlqo.execution.operators.base.Context.calibration`):
        the statistics' calibration, when they have one with a cascade plan; bundled defaults only
        when measured on this setup (their confidence figures are their model's)."""
        return self._trust(self.statistics)

    def _trust(self, stats: Statistics | None) -> Trust | None:
        if stats is None or stats.calibration is None:
            return None
        if stats.bundled and differences(stats, self.identity):
            return None
        return stats.calibration.trust()

    def state(self, owner: str, make):
        """What operator ``owner`` keeps across this engine's questions, made on first use
        (:meth:`nlqo.execution.operators.base.Context.state`)."""
        if owner not in self.states:
            self.states[owner] = make()
        return self.states[owner]

    def _check(self, question: str) -> None:
        """The same checks the CLI makes before a model loads (:func:`nlqo.parser.questions.check_question`)."""
        check_question(question, max_chars=self.config.max_question_chars)

    def plan(self, question: str, *, strategy: str | None = None, trace: Trace | None = None) -> Planned:
        """Choose the operator and, when it needs one, parse and optimise a plan; lower it.

        ``auto`` chooses by statistics and policy before anything runs (:meth:`choose`), and parses
        only for an operator that needs a plan. An operator named as the strategy is forced on the
        parsed plan. Parse failures are reported, not raised."""
        self._check(question)
        strategy = strategy or self.config.strategy
        trace = trace or Trace()
        choice = None
        if strategy == AUTO and self.config.policy == Policy.STRUCTURAL:
            strategy = PLANNED
        if strategy == AUTO:
            choice = self.choose(question)
            if not OPERATORS[choice.operator].needs_plan:
                skipped = f"no parse: {choice.operator} needs no plan"
                return self.unparsed(question, choice.operator, choice=attrs.evolve(choice, skipped=skipped))
            strategy = choice.operator
        planned = self._parse_and_plan(question, strategy, trace)
        if choice is not None and planned.physical is not None:
            planned = attrs.evolve(planned, physical=attrs.evolve(planned.physical, choice=choice))
        return planned

    def _parse_and_plan(self, question: str, strategy: str, trace: Trace) -> Planned:
        started = time.perf_counter()
        at = trace.now_ms()
        try:
            parsed = parse_configured(question, self.llm, self.config)
        except ParseFailure as exc:
            trace.record(
                Step(
                    node="parse",
                    kind="llm",
                    text=str(exc),
                    started_ms=at,
                    note="no valid IR: the linear template runs instead",
                )
            )
            return Planned(None, None, (time.perf_counter() - started) * 1000, error=str(exc))
        trace.record(Step.llm("parse", parsed.usage, parsed.text, at, note=parsed.describe()))
        planned = self.plan_query(parsed.query, strategy=strategy, trace=trace)
        assert planned.plan is not None and planned.physical is not None  # plan_query always plans
        plan = attrs.evolve(planned.plan, warnings=parsed.warnings + planned.plan.warnings)
        return attrs.evolve(
            planned,
            plan=plan,
            physical=attrs.evolve(planned.physical, logical=plan),
            planning_ms=(time.perf_counter() - started) * 1000,
        )

    def choose(self, question: str) -> Choice:
        """The operator the policy picks for ``question`` from the statistics, with every candidate: an
        operator measured by no statistics (not even the bundled ones) by its structural estimate, EM unknown."""
        from nlqo.planner.statistics.store import BUNDLED, load

        bundled = load(BUNDLED, bundled=True)
        stats = self.statistics or bundled
        kind = question_class(question)
        scale = self._time_scale(stats)
        trust = self._trust(stats)
        candidates = []
        for operator, op in OPERATORS.items():
            got = measured_candidate(
                stats, operator, kind, trust, plan_escalations=self.config.plan_escalations, scale=scale
            )
            if got is not None:
                candidates.append(got)
            elif operator not in bundled.operators:
                seconds = op.estimate(self._one_atom(question), self.profile, self.k).ms / 1000
                basis = f"no statistics, EM unknown: structural estimate ('nlqo analyze --operators {operator}' measures it)"
                candidates.append(Candidate(str(operator), 0.0, 0.0, 1.0, 0, seconds, basis))
        choice = choose(
            candidates, self.config.policy, time_budget=self.config.time_budget, em_margin=self.config.em_margin
        )
        note = stats.describe()
        if stats.bundled:
            diff = differences(stats, self.identity)
            note += "; measured with " + "; ".join(diff) + " (run 'nlqo analyze' for this setup)" if diff else ""
        return attrs.evolve(choice, question_class=str(kind), statistics=note)

    def _time_scale(self, stats: Statistics) -> float:
        """Measured seconds scaled to this backend's speed, when both were measured."""
        if stats.prefill_ms_per_token and self.profile.source == "measured":
            return self.profile.prefill_ms_per_token / stats.prefill_ms_per_token
        return 1.0

    def _one_atom(self, question: str) -> Plan:
        """The question as one atom, not parsed."""
        atom = Atom("q1", Var("answer"), Const("answers"), Const(question))
        return self.optimizer.optimize(Query(atoms=(atom,), answer=(Var("answer"),), question=question))

    def unparsed(self, question: str, operator: str, *, choice: Choice | None = None, reason: str = "") -> Planned:
        """A physical plan for an operator that needs no plan: the question as one atom, not parsed."""
        started = time.perf_counter()
        plan = self._one_atom(question)
        physical = lower(plan, self.profile, k=self.k, force=operator, simple=self.config.simple_plans)
        estimates = {str(o): op.estimate(plan, self.profile, self.k) for o, op in OPERATORS.items()}
        why = reason or (
            f"chosen by the {choice.policy} policy: {choice.reason}" if choice else f"forced by --strategy {operator}"
        )
        physical = attrs.evolve(physical, estimates=estimates, parsed=False, choice=choice, reason=why, hints=())
        return Planned(plan, physical, (time.perf_counter() - started) * 1000)

    def plan_query(self, query: Query, *, strategy: str | None = None, trace: Trace | None = None) -> Planned:
        """Optimise and lower an already parsed query (a hand-written IR file, say)."""
        trace = trace or Trace()
        started = time.perf_counter()
        at = trace.now_ms()
        strategy = strategy or self.config.strategy
        plan = self.optimizer.optimize(query)
        if plan.stats.llm_calls:
            trace.record(Step.llm("relations", plan.stats.llm_usage, f"{plan.stats.llm_calls} relation calls", at))
        physical = lower(
            plan,
            self.profile,
            k=self.k,
            force=None if strategy in (AUTO, PLANNED) else strategy,
            simple=self.config.simple_plans,
        )
        return Planned(plan, physical, (time.perf_counter() - started) * 1000)

    def ask(self, question: str, *, strategy: str | None = None, trace: Trace | None = None) -> RunResult:
        """Answer ``question``: ``linear`` runs the template directly; ``tree`` and ``auto`` plan first.
        An empty answer gets one more try (:func:`~nlqo.execution.fallback.answer_or_fallback`), and
        so does a choice question's answer that names none of its options (:mod:`nlqo.execution.choice`)."""
        self._check(question)
        strategy = strategy or self.config.strategy
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
        trace = trace or Trace()
        return self.execute(
            question, self.prepare(question, strategy=strategy, trace=trace), strategy=strategy, trace=trace
        )

    def prepare(self, question: str, *, strategy: str, trace: Trace) -> Planned:
        """What :meth:`ask` runs for ``strategy``: a plan, or the question as one atom for an operator that needs none."""
        if strategy != AUTO and not OPERATORS[strategy].needs_plan:
            return self.unparsed(question, strategy)
        return self.plan(question, strategy=strategy, trace=trace)

    def execute(
        self, question: str, planned: Planned, *, strategy: str | None = None, trace: Trace | None = None
    ) -> RunResult:
        """Run a planned question on its physical operator (the template when there is no plan)."""
        self._check(question)
        strategy = strategy or self.config.strategy
        trace = trace or Trace()
        return self._finish(self.run_planned(question, planned, strategy, trace), trace)

    def _finish(self, result: RunResult, trace: Trace) -> RunResult:
        """An empty answer asked again (:func:`answer_or_fallback`), then a choice question's answer
        held to its options (:func:`held_to_options`, when ``hold_options``); their time counts as execution."""
        started = time.perf_counter()
        finished = answer_or_fallback(result, self.llm, k=self.k, trace=trace)
        if self.config.hold_options:
            finished = held_to_options(finished, self.llm, trace=trace)
        if finished is result:
            return result
        return attrs.evolve(finished, execution_ms=result.execution_ms + (time.perf_counter() - started) * 1000)

    def run_planned(self, question: str, planned: Planned, strategy: str, trace: Trace) -> RunResult:
        """Run a planned question on its physical operator (the template when the question did not
        parse), without the final checks of :meth:`execute`."""
        if planned.physical is None:  # the question could not be parsed: the template needs no plan
            simple = strategy == AUTO and self.config.simple_plans == Operator.RETRIEVE
            operator = RETRIEVE if simple else TEMPLATE
            result = operator.run(self, question, None, trace, strategy)
            return attrs.evolve(
                result,
                planning_ms=planned.planning_ms,
                stop_reason=stop_reasons(PARSE_FAILED, result.stop_reason),
                operator=str(operator.name),
            )
        physical = planned.physical
        result = OPERATORS[physical.operator].run(self, question, physical, trace, strategy)
        plan = physical.logical if physical.parsed else None
        return attrs.evolve(
            result,
            question=question,
            planning_ms=planned.planning_ms + result.planning_ms,
            plan=plan,
            physical=physical,
            operator=str(physical.operator),
        )

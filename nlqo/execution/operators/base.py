"""The one interface of a physical operator (estimate, run, explain) and the narrow context it runs in."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, TypeVar

if TYPE_CHECKING:
    from nlqo.common.passages import Embedder, Retriever
    from nlqo.config import EngineConfig
    from nlqo.execution.physical import BackendProfile, Estimate, PhysicalPlan
    from nlqo.execution.trace import RunResult, Trace
    from nlqo.optimizer.plan import Plan
    from nlqo.runtime.llm.base import LLM
    from nlqo.runtime.llm.confidence import Confidence

T = TypeVar("T")

PLANNED = "planned"
"""The strategy that parses, plans and lowers by structural cost (what a cascade escalates to)."""


class Calibrated(Protocol):
    """What a cascade escalates by: confidence calibrated against exact match on ``nlqo analyze``'s
    sample (:class:`nlqo.planner.statistics.calibration.Trust` is one)."""

    @property
    def target(self) -> str:
        """The operator a doubtful first answer escalates to."""
        ...

    @property
    def feature(self) -> str:
        """The first operator's calibrated confidence feature."""
        ...

    @property
    def threshold(self) -> float | None:
        """Below it the first answer is doubtful (None: only an unsupported answer is)."""
        ...

    def feature_of(self, operator: str) -> str | None:
        """An operator's calibrated feature."""
        ...

    def value(self, operator: str, confidence: "Confidence | None") -> float | None:
        """An answer's calibrated feature, for the operator that gave it; None when not known."""
        ...

    def probability(self, operator: str, confidence: "Confidence | None", signals: Mapping[str, bool]) -> float | None:
        """The probability that the operator's answer is right, from its confidence and its 0/1
        signals (``supported``, ``agree``); None when not known."""
        ...


class Context(Protocol):
    """What an operator may use while it runs: the parts, the settings, and the stages before it (to
    plan a question it escalates). The engine is one; an operator never sees more of it than this."""

    llm: "LLM"
    retriever: "Retriever"
    embedder: "Embedder"
    config: "EngineConfig"

    @property
    def k(self) -> int: ...

    @property
    def calibration(self) -> Calibrated | None:
        """The calibration a cascade escalates by, when the statistics have one for this setup."""
        ...

    def plan(self, question: str, *, strategy: str | None = None, trace: "Trace | None" = None) -> Any:
        """Parse, optimise and lower ``question`` for ``strategy`` (:data:`PLANNED`: by structural cost)."""
        ...

    def prepare(self, question: str, *, strategy: str, trace: "Trace") -> Any:
        """What ``strategy`` (an operator) runs for ``question`` when forced: the question as one
        atom for an operator that needs no plan, else parsed, optimised and lowered."""
        ...

    def run_planned(self, question: str, planned: Any, strategy: str, trace: "Trace") -> "RunResult":
        """Run what :meth:`plan` returned on its operator."""
        ...

    def state(self, owner: str, make: Callable[[], T]) -> T:
        """What ``owner`` keeps across the questions of this context (an executor holding a prefilled
        prefix, say): made by ``make`` on first use, the same object after."""
        ...


class PhysicalOperator(Protocol):
    """One way of answering a question, registered in :data:`nlqo.execution.operators.OPERATORS`."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str:
        """The name EXPLAIN prints."""
        ...

    @property
    def needs_plan(self) -> bool:
        """Whether it runs on a parsed logical plan (else the question is not parsed for it)."""
        ...

    def candidate(self, shape: str, simple: str) -> bool:
        """Whether the structural lowering weighs it for a plan of this shape ('single', 'chain',
        'branching'; ``simple`` is the ``simple_plans`` setting); ``auto`` by statistics weighs every operator."""
        ...

    def estimate(self, plan: "Plan", profile: "BackendProfile", k: int) -> "Estimate":
        """Structural cost before any statistics: from the plan's shape and per-token costs."""
        ...

    def run(
        self, context: Context, question: str, physical: "PhysicalPlan | None", trace: "Trace", strategy: str
    ) -> "RunResult":
        """Answer ``question``; every call goes into ``trace``."""
        ...

    def annotate(self, physical: "PhysicalPlan") -> Mapping[str, str]:
        """What runs each plan node, for EXPLAIN."""
        ...


def at_root(physical: "PhysicalPlan", text: str) -> dict[str, str]:
    """Annotations of an operator that answers the whole question at the plan's root."""
    from nlqo.optimizer.plan import ROOT

    return {n: text if n == ROOT else "answered by the root's operator" for n in physical.logical.tree.nodes}

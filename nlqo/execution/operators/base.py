"""The one interface of a physical operator: estimate, run, explain."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Protocol

from nlqo.kinds import Operator

if TYPE_CHECKING:
    from nlqo.execution.engine import Engine
    from nlqo.planner.lower import BackendProfile, Estimate, PhysicalPlan
    from nlqo.execution.trace import RunResult, Trace
    from nlqo.optimizer.plan import Plan


class PhysicalOperator(Protocol):
    """One way of answering a question. Modules of :mod:`nlqo.execution.operators` each define one."""

    @property
    def name(self) -> Operator: ...

    @property
    def label(self) -> str:
        """The name EXPLAIN prints."""
        ...

    @property
    def needs_plan(self) -> bool:
        """Whether it runs on a parsed logical plan (else the question is not parsed for it)."""
        ...

    def estimate(self, plan: "Plan", profile: "BackendProfile", k: int) -> "Estimate":
        """Structural cost before any statistics: from the plan's shape and per-token costs."""
        ...

    def run(
        self, engine: "Engine", question: str, physical: "PhysicalPlan", trace: "Trace", strategy: str
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

"""The one registry of EXPLAIN output formats: what ``nlqo plan`` and ``nlqo explain`` print.

Each :class:`~nlqo.kinds.OutputFormat` has a renderer for a logical plan (:class:`LogicalView`,
``nlqo plan``) and one for a physical plan with or without a run (:class:`PhysicalView`,
``nlqo explain [--analyze]``); both commands offer every format of the enum.

>>> from nlqo.optimizer.optimizer import Optimizer
>>> from nlqo.ir.syntax import parse
>>> plan = Optimizer().optimize(parse('q1 = ("Jaws", "directed by", ?d)\\nanswer ?d'))
>>> json.loads(render(LogicalView(plan), "json"))["answer_var"]
'?d'
>>> render(LogicalView(plan), OutputFormat.DOT).splitlines()[0]
'digraph plan {'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import attrs

from nlqo.explain import html
from nlqo.explain import render as explain  # formats.render, below, is this module's own function
from nlqo.optimizer.cost import CostContext, CostModel
from nlqo.optimizer.optimizer import Optimizer
from nlqo.errors import NlqoError
from nlqo.explain import analyze
from nlqo.execution.physical import PhysicalPlan
from nlqo.execution.trace import RunResult
from nlqo.kinds import OutputFormat
from nlqo.optimizer.plan import Cost, Plan

__all__ = ["LOGICAL", "PHYSICAL", "LogicalView", "OutputFormat", "PhysicalView", "render", "write"]


@attrs.frozen
class LogicalView:
    """A logical plan as ``nlqo plan`` shows it."""

    plan: Plan
    model: CostModel | None = None
    costs: Mapping[str, Cost] | None = None
    """Each node's subtree cost (:func:`nlqo.explain.render.node_costs`)."""
    verbose: bool = False
    """Text only: add the search summary and every pair relation."""

    def to_dict(self) -> dict[str, Any]:
        return explain.to_dict(self.plan, model=self.model, costs=self.costs)


@attrs.frozen
class PhysicalView:
    """A physical plan as ``nlqo explain`` shows it; with ``result``, EXPLAIN ANALYZE."""

    physical: PhysicalPlan
    result: RunResult | None = None
    model: CostModel | None = None
    costs: Mapping[str, Cost] | None = None
    escalation_costs: Mapping[str, Cost] | None = None
    """Each node's cost in the plan a cascade's escalation ran (``result.escalation``), when it ran one."""

    def to_dict(self) -> dict[str, Any]:
        return analyze.to_dict(
            self.result, self.physical, model=self.model, costs=self.costs, escalation_costs=self.escalation_costs
        )

    def annotations(self) -> dict[str, str]:
        """Per-node notes: the operator, and with a run the actuals."""
        if self.result is None:
            return analyze.physical_annotations(self.physical)
        return analyze.actual_annotations(self.result, self.physical)

    @classmethod
    def of(cls, optimizer: Optimizer, physical: PhysicalPlan, result: RunResult | None = None) -> "PhysicalView":
        """``physical`` (and with ``result`` its run) with each node's cost under ``optimizer``'s cost model."""
        model = optimizer.cost_model

        def costs(plan: PhysicalPlan) -> Mapping[str, Cost]:
            logical = plan.logical
            return explain.node_costs(logical, model, CostContext(logical.query, logical.relations, optimizer.embedder))

        escalation = None if result is None else result.escalation
        return cls(
            physical,
            result,
            model=model,
            costs=costs(physical),
            escalation_costs=None if escalation is None else costs(escalation),
        )


def _json(view: LogicalView | PhysicalView) -> str:
    return json.dumps(view.to_dict(), indent=2, ensure_ascii=False, allow_nan=False)  # never Infinity or NaN


def _html(view: LogicalView | PhysicalView) -> str:
    return html.render([html.entry(view.to_dict())])


LOGICAL: Mapping[OutputFormat, Callable[[LogicalView], str]] = {
    OutputFormat.TEXT: lambda v: explain.text(v.plan, model=v.model, costs=v.costs, verbose=v.verbose),
    OutputFormat.JSON: _json,
    OutputFormat.DOT: lambda v: explain.dot(v.plan, costs=v.costs),
    OutputFormat.HTML: _html,
}
"""Renderers of a logical plan, one per format."""

PHYSICAL: Mapping[OutputFormat, Callable[[PhysicalView], str]] = {
    OutputFormat.TEXT: lambda v: analyze.text(
        v.result, v.physical, model=v.model, costs=v.costs, escalation_costs=v.escalation_costs
    ),
    OutputFormat.JSON: _json,
    OutputFormat.DOT: lambda v: explain.dot(v.physical.logical, costs=v.costs, annotations=v.annotations()),
    OutputFormat.HTML: _html,
}
"""Renderers of a physical plan (and its run), one per format."""


def render(view: LogicalView | PhysicalView, fmt: OutputFormat | str) -> str:
    """``view`` in the format ``fmt``."""
    if isinstance(view, LogicalView):
        return LOGICAL[OutputFormat(fmt)](view)
    return PHYSICAL[OutputFormat(fmt)](view)


def write(text: str, out: Path | None, *, say: bool = True) -> None:
    """Print ``text``, or write it to ``out`` (saying so on stderr unless ``say`` is false).

    An ``OSError`` writing ``out`` becomes an :class:`~nlqo.errors.NlqoError` naming the file.
    """
    if out is None:
        print(text)
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise NlqoError(f"cannot write {out}: {exc.strerror or exc}") from None
    if say:
        print(f"nlqo: wrote {out}", file=sys.stderr)

"""Physical operators: every way the engine answers a question, one module each, one interface
(:class:`~nlqo.execution.operators.base.PhysicalOperator`: estimate, run, annotate). ``OPERATORS`` is the
only registry; adding an operator is one module and one entry here (and its name in
:class:`nlqo.kinds.Operator`).

>>> sorted(map(str, OPERATORS))
['cascade', 'iterate', 'linear', 'retrieve', 'tree']
>>> [str(o) for o in OPERATORS if OPERATORS[o].needs_plan]
['tree']
"""

from __future__ import annotations

from nlqo.kinds import Operator
from nlqo.execution.operators.base import PhysicalOperator
from nlqo.execution.operators.cascade import CASCADE
from nlqo.execution.operators.iterate import ITERATE
from nlqo.execution.operators.retrieve import RETRIEVE
from nlqo.execution.operators.template import TEMPLATE
from nlqo.execution.operators.tree import TREE

OPERATORS: dict[Operator, PhysicalOperator] = {op.name: op for op in (RETRIEVE, ITERATE, TEMPLATE, TREE, CASCADE)}

__all__ = ["OPERATORS", "PhysicalOperator"]

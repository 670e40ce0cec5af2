"""Physical operators: every way the engine answers a question, one module each, one interface
(:class:`~nlqo.execution.operators.base.PhysicalOperator`: estimate, run, annotate). ``OPERATORS`` is the
only registry: the built-ins, then what installed packages register; adding one is one module and one
registration (docs/architecture.md).

>>> sorted(map(str, OPERATORS))
['cascade', 'iterate', 'linear', 'retrieve', 'tree']
>>> [str(o) for o in OPERATORS if OPERATORS[o].needs_plan]
['tree']
"""

from __future__ import annotations

from functools import cached_property
from importlib.metadata import entry_points
from typing import Iterator, Mapping

from nlqo.config import OPERATOR_GROUP
from nlqo.errors import ConfigError
from nlqo.execution.operators.base import PhysicalOperator
from nlqo.execution.operators.cascade import CASCADE
from nlqo.execution.operators.iterate import ITERATE
from nlqo.execution.operators.retrieve import RETRIEVE
from nlqo.execution.operators.template import TEMPLATE
from nlqo.execution.operators.tree import TREE


class Registry(Mapping[str, PhysicalOperator]):
    """Operators by name: ``builtins``, then the entry points of :data:`~nlqo.config.OPERATOR_GROUP`
    (objects with the operator's interface, named as their entry points), loaded when first read."""

    def __init__(self, *builtins: PhysicalOperator) -> None:
        self.builtins = builtins

    @cached_property
    def loaded(self) -> dict[str, PhysicalOperator]:
        found = {op.name: op for op in self.builtins}
        for ep in entry_points(group=OPERATOR_GROUP):
            op = ep.load()
            if op.name != ep.name:
                raise ConfigError(f"the operator registered as {ep.name!r} ({ep.value}) is named {op.name!r}")
            found[op.name] = op
        return found

    def __getitem__(self, name: str) -> PhysicalOperator:
        return self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.loaded)

    def __len__(self) -> int:
        return len(self.loaded)


OPERATORS = Registry(RETRIEVE, ITERATE, TEMPLATE, TREE, CASCADE)

__all__ = ["OPERATORS", "PhysicalOperator"]

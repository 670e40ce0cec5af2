"""Cost-model files: parse with ``grammar/cost.lark``, evaluate on trees.

>>> model = CostModel.parse("param alpha = 2\\ncost = depth - alpha * size")
>>> sorted(model.names)
['depth', 'size']
>>> model.evaluate_values({"depth": 3.0, "size": 2.0})
-1.0
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs
import lark

from nlqo.cost.metrics import CostContext, Metric, registry
from nlqo.errors import CostModelError
from nlqo.plan import Cost, Tree
from nlqo.resources import builtin_dir, find

_FUNCTIONS = {"min": min, "max": max, "abs": abs, "log": math.log}


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark((builtin_dir("grammar") / "cost.lark").read_text(), parser="lalr", propagate_positions=True)


class _ToExpr(lark.Transformer):
    """Parse tree -> nested tuples: ('num', x) | ('name', n, line, col) | (op, a, b) | ('neg', a) | ('call', f, args)."""

    def number(self, items):
        return ("num", float(items[0]))

    def name(self, items):
        return ("name", str(items[0]), items[0].line, items[0].column)

    def call(self, items):
        fn = items[0]
        if str(fn) not in _FUNCTIONS:
            raise CostModelError(f"line {fn.line}, column {fn.column}: unknown function {str(fn)!r} (known: {', '.join(_FUNCTIONS)})")
        return ("call", str(fn), tuple(items[1:]))

    def add(self, items):
        return ("+", items[0], items[1])

    def sub(self, items):
        return ("-", items[0], items[1])

    def mul(self, items):
        return ("*", items[0], items[1])

    def div(self, items):
        return ("/", items[0], items[1])

    def neg(self, items):
        return ("neg", items[0])

    def pos(self, items):
        return float(items[0])

    def negnum(self, items):
        return -float(items[0])


def _names(expr) -> set[tuple[str, int, int]]:
    tag = expr[0]
    if tag == "name":
        return {(expr[1], expr[2], expr[3])}
    if tag == "num":
        return set()
    if tag == "call":
        return set().union(*(_names(a) for a in expr[2]))
    return set().union(*(_names(a) for a in expr[1:]))


def _eval(expr, env: Mapping[str, float]) -> float:
    tag = expr[0]
    if tag == "num":
        return expr[1]
    if tag == "name":
        return env[expr[1]]
    if tag == "neg":
        return -_eval(expr[1], env)
    if tag == "call":
        return float(_FUNCTIONS[expr[1]](*(_eval(a, env) for a in expr[2])))
    a, b = _eval(expr[1], env), _eval(expr[2], env)
    if tag == "+":
        return a + b
    if tag == "-":
        return a - b
    if tag == "*":
        return a * b
    return a / b if b else math.inf


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _render(expr, outer: int = 0, right: bool = False) -> str:
    """Expression text with only the parentheses it needs."""
    tag = expr[0]
    if tag == "num":
        return f"{expr[1]:g}"
    if tag == "name":
        return expr[1]
    if tag == "neg":
        return f"-{_render(expr[1], 3)}"
    if tag == "call":
        return f"{expr[1]}({', '.join(_render(a) for a in expr[2])})"
    level = _PRECEDENCE[tag]
    body = f"{_render(expr[1], level)} {tag} {_render(expr[2], level, right=True)}"
    return f"({body})" if level < outer or (right and level == outer) else body


@attrs.frozen
class CostModel:
    """A named cost expression over metrics, with parameters. Lower cost is better."""

    name: str
    expression: Any = attrs.field(repr=False)
    params: Mapping[str, float] = attrs.field(factory=dict)
    metrics: Mapping[str, Metric] = attrs.field(factory=registry, repr=False, eq=False)
    description: str = ""
    source: str = "<string>"

    @classmethod
    def parse(cls, text: str, *, name: str = "inline", source: str = "<string>", metrics: Mapping[str, Metric] | None = None, params: Mapping[str, float] | None = None) -> "CostModel":
        """Parse cost-model text; unknown names and syntax errors name the line and column."""
        try:
            tree = _parser().parse(text)
        except lark.UnexpectedInput as exc:
            line, col = getattr(exc, "line", "?"), getattr(exc, "column", "?")
            shown = text.splitlines()[line - 1] if isinstance(line, int) and 0 < line <= len(text.splitlines()) else ""
            what = "the text ends in the middle of a statement" if isinstance(exc, lark.UnexpectedEOF) else "unexpected text"
            if isinstance(exc, lark.UnexpectedToken):
                what = f"unexpected {str(exc.token)!r}" if str(exc.token).strip() else "the line ends in the middle of a statement"
            raise CostModelError(f"{source}:{line}:{col}: cannot read the cost model here ({what}):\n  {shown}") from None
        except lark.exceptions.VisitError as exc:  # pragma: no cover - raised by transformer
            raise exc.orig_exc from None
        try:
            statements = _ToExpr().transform(tree).children
        except lark.exceptions.VisitError as exc:
            raise CostModelError(f"{source}: {exc.orig_exc}") from None
        known = registry(metrics) if metrics is not None else registry()
        found_params: dict[str, float] = {}
        description, expression = "", None
        for st in statements:
            if st.data == "param":
                found_params[str(st.children[0])] = st.children[1]
            elif st.data == "description":
                description = json.loads(str(st.children[0]))
            else:
                if expression is not None:
                    raise CostModelError(f"{source}: more than one 'cost =' statement")
                expression = st.children[0]
        if expression is None:
            raise CostModelError(f"{source}: no 'cost = ...' statement")
        found_params.update(params or {})
        for n, line, col in sorted(_names(expression)):
            if n not in found_params and n not in known:
                raise CostModelError(
                    f"{source}:{line}:{col}: unknown name {n!r}: not a param and not a metric "
                    f"(metrics: {', '.join(sorted(known))})"
                )
        return cls(name=name, expression=expression, params=found_params, metrics=known, description=description, source=source)

    @property
    def names(self) -> frozenset[str]:
        """Metric names the expression uses."""
        return frozenset(n for n, _, _ in _names(self.expression) if n not in self.params)

    def formula(self) -> str:
        return _render(self.expression)

    def with_params(self, **params: float) -> "CostModel":
        unknown = set(params) - set(self.params)
        if unknown:
            raise CostModelError(f"cost model {self.name!r} has no parameter(s) {', '.join(sorted(unknown))}")
        return attrs.evolve(self, params={**self.params, **params})

    def evaluate_values(self, values: Mapping[str, float]) -> float:
        return _eval(self.expression, {**values, **self.params})

    def terms(self, tree: Tree, ctx: CostContext) -> dict[str, float]:
        return {n: float(self.metrics[n](tree, ctx)) for n in sorted(self.names)}

    def evaluate(self, tree: Tree, ctx: CostContext) -> Cost:
        terms = self.terms(tree, ctx)
        return Cost(total=self.evaluate_values(terms), terms=terms)


def load_cost_model(name_or_path: str = "default", *, path: Sequence[str | Path] = (), metrics: Mapping[str, Metric] | None = None, params: Mapping[str, float] | None = None) -> CostModel:
    """Load a cost model by name (searched on the resource path) or file path."""
    file = find("cost_models", name_or_path, ".cost", path)
    return CostModel.parse(file.read_text(), name=file.stem, source=str(file), metrics=metrics, params=params)

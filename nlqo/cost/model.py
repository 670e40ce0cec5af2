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
from typing import Any, Callable, Mapping, Sequence

import attrs
import lark

from nlqo.cost.metrics import CostContext, Metric, registry, structure_of
from nlqo.cost.shape import Shape
from nlqo.errors import CostModelError
from nlqo.plan import Cost, Tree
from nlqo.resources import builtin_dir, find

Direction = int | None
"""+1: the cost never decreases as the quantity grows; -1: never increases; None: either (unknown)."""

_FUNCTIONS: dict[str, Callable[..., float]] = {"min": min, "max": max, "abs": abs, "log": math.log}


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
            raise CostModelError(
                f"line {fn.line}, column {fn.column}: unknown function {str(fn)!r} (known: {', '.join(_FUNCTIONS)})"
            )
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


def _merge(a: Mapping[str, Direction], b: Mapping[str, Direction]) -> dict[str, Direction]:
    out = dict(a)
    for name, d in b.items():
        out[name] = d if name not in out or out[name] == d else None
    return out


def _scaled(signs: Mapping[str, Direction], factor: float) -> dict[str, Direction]:
    if factor == 0:
        return {}
    return {n: (None if d is None else d * (1 if factor > 0 else -1)) for n, d in signs.items()}


def _signs(expr, params: Mapping[str, float]) -> dict[str, Direction]:
    """How the expression moves with each name that is not a parameter.

    >>> _signs(_ToExpr().transform(_parser().parse("cost = a - 2 * b + max(a, c) / 4")).children[0].children[0], {})
    {'a': 1, 'b': -1, 'c': 1}
    """
    tag = expr[0]
    if tag == "num":
        return {}
    if tag == "name":
        return {} if expr[1] in params else {expr[1]: 1}
    if tag == "neg":
        return _scaled(_signs(expr[1], params), -1)
    if tag == "call":
        parts = [_signs(a, params) for a in expr[2]]
        if expr[1] in ("min", "max", "log"):
            out: dict[str, Direction] = {}
            for p in parts:
                out = _merge(out, p)
            return out
        return {n: None for p in parts for n in p}
    left, right = _signs(expr[1], params), _signs(expr[2], params)
    if tag == "+":
        return _merge(left, right)
    if tag == "-":
        return _merge(left, _scaled(right, -1))
    if tag == "*":
        if not left:
            return _scaled(right, _eval(expr[1], params))
        if not right:
            return _scaled(left, _eval(expr[2], params))
        return {n: None for n in (*left, *right)}
    if not right:  # division by a constant
        divisor = _eval(expr[2], params)
        return _scaled(left, 1 / divisor if divisor else 0)
    return {n: None for n in (*left, *right)}


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
    def parse(
        cls,
        text: str,
        *,
        name: str = "inline",
        source: str = "<string>",
        metrics: Mapping[str, Metric] | None = None,
        params: Mapping[str, float] | None = None,
    ) -> "CostModel":
        """Parse cost-model text; unknown names and syntax errors name the line and column."""
        try:
            tree = _parser().parse(text)
        except lark.UnexpectedInput as exc:
            line, col = getattr(exc, "line", "?"), getattr(exc, "column", "?")
            shown = text.splitlines()[line - 1] if isinstance(line, int) and 0 < line <= len(text.splitlines()) else ""
            ended = isinstance(exc, lark.UnexpectedEOF) or (
                isinstance(exc, lark.UnexpectedToken) and exc.token.type == "$END"
            )
            what = "the text ends in the middle of a statement" if ended else "unexpected text"
            if isinstance(exc, lark.UnexpectedToken) and not ended:
                what = (
                    f"unexpected {str(exc.token)!r}"
                    if str(exc.token).strip()
                    else "the line ends in the middle of a statement"
                )
            raise CostModelError(
                f"{source}:{line}:{col}: cannot read the cost model here ({what}):\n  {shown}"
            ) from None
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
        return cls(
            name=name, expression=expression, params=found_params, metrics=known, description=description, source=source
        )

    @property
    def names(self) -> frozenset[str]:
        """Metric names the expression uses."""
        return frozenset(n for n, _, _ in _names(self.expression) if n not in self.params)

    def formula(self) -> str:
        return _render(self.expression)

    @property
    def semantic(self) -> frozenset[str]:
        """Metrics the expression uses that are not declared structural (``similarity``, most user metrics)."""
        return frozenset(n for n in self.names if structure_of(self.metrics[n]) is None)

    def directions(self) -> dict[str, Direction]:
        """How the cost moves with each structural field it depends on (:mod:`nlqo.cost.shape`).

        >>> load_cost_model("structural").directions()
        {'edges': -1, 'height': 1, 'imbalance': 1, 'size': -1}
        >>> CostModel.parse("cost = abs(depth - 2) - leaves").directions()
        {'height': None, 'leaves': -1}
        """
        out: dict[str, Direction] = {}
        for name, sign in sorted(_signs(self.expression, self.params).items()):
            structure = structure_of(self.metrics[name])
            if structure is None:
                continue
            out = _merge(out, {f: (None if sign is None else sign * d) for f, d in structure.directions.items()})
        return dict(sorted(out.items()))

    def shape_cost(self, shape: Shape) -> float:
        """The cost of a tree with this summary, counting semantic metrics as 0 (the greedy search's score)."""
        values = {}
        for name in self.names:
            structure = structure_of(self.metrics[name])
            values[name] = float(structure.of_shape(shape)) if structure is not None else 0.0
        return self.evaluate_values(values)

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


def load_cost_model(
    name_or_path: str = "default",
    *,
    path: Sequence[str | Path] = (),
    metrics: Mapping[str, Metric] | None = None,
    params: Mapping[str, float] | None = None,
) -> CostModel:
    """Load a cost model by name (searched on the resource path) or file path."""
    file = find("cost_models", name_or_path, ".cost", path)
    return CostModel.parse(file.read_text(), name=file.stem, source=str(file), metrics=metrics, params=params)

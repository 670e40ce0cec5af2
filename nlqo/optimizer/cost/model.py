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
from typing import Mapping, Sequence

import attrs
import lark

from nlqo.optimizer.cost.expr import (
    ARITY,
    FUNCTIONS,
    BinOp,
    Call,
    Direction,
    Expr,
    Name,
    Neg,
    Num,
    evaluate,
    merge,
    names,
    render,
    signs,
)
from nlqo.optimizer.cost.metrics import CostContext, Metric, registry, structure_of
from nlqo.optimizer.cost.shape import Shape
from nlqo.errors import CostModelError
from nlqo.optimizer.plan import Cost, Tree
from nlqo.common.resources import builtin_dir, find


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark((builtin_dir("grammar") / "cost.lark").read_text(), parser="lalr", propagate_positions=True)


class _ToExpr(lark.Transformer):
    """Parse tree -> :mod:`nlqo.optimizer.cost.expr` nodes."""

    def number(self, items):
        return Num(_finite(items[0]))

    def name(self, items):
        return Name(str(items[0]), items[0].line, items[0].column)

    def call(self, items):
        fn = items[0]
        if str(fn) not in FUNCTIONS:
            raise CostModelError(
                f"line {fn.line}, column {fn.column}: unknown function {str(fn)!r} (known: {', '.join(FUNCTIONS)})"
            )
        least, most = ARITY[str(fn)]
        given = len(items) - 1
        if given < least or (most is not None and given > most):
            wanted = f"{least}" if least == most else f"at least {least}"
            raise CostModelError(
                f"line {fn.line}, column {fn.column}: {str(fn)}() takes {wanted} argument{'s' * (wanted != '1')}, "
                f"not {given}"
            )
        return Call(str(fn), tuple(items[1:]))

    def add(self, items):
        return BinOp("+", items[0], items[1])

    def sub(self, items):
        return BinOp("-", items[0], items[1])

    def mul(self, items):
        return BinOp("*", items[0], items[1])

    def div(self, items):
        return BinOp("/", items[0], items[1])

    def neg(self, items):
        return Neg(items[0])

    def pos(self, items):
        return _finite(items[0])

    def negnum(self, items):
        return -_finite(items[0])


def _line_at(text: str, line: object) -> str:
    r"""Line ``line`` of ``text`` as the parser counts lines (1-based, split at ``\n`` only, where
    ``splitlines`` also breaks at ``\f``, ``\x1c``, ``\u2028``, ...), without a trailing ``\r``;
    ``""`` when there is no such line.

    >>> text = "cost = 1 + \r\nparam a = 2 \fX"
    >>> _line_at(text, 1), _line_at(text, 2)
    ('cost = 1 + ', 'param a = 2 \x0cX')
    >>> _line_at("a\nb", 0), _line_at("a\nb", 3), _line_at("a\nb", -1), _line_at("a\nb", "?")
    ('', '', '', '')
    """
    lines = text.split("\n")
    return lines[line - 1].rstrip("\r") if isinstance(line, int) and 0 < line <= len(lines) else ""


def _finite(token: lark.Token) -> float:
    """A number of the cost language; one too large for a float (``1e999``) is refused."""
    value = float(token)
    if not math.isfinite(value):
        raise CostModelError(f"line {token.line}, column {token.column}: {str(token)} is too large a number")
    return value


@attrs.frozen
class CostModel:
    """A named cost expression over metrics, with parameters. Lower cost is better."""

    name: str
    expression: Expr = attrs.field(repr=False)
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
            shown = _line_at(text, line)
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
        known = registry(metrics)
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
        for found in sorted(names(expression), key=lambda n: (n.name, n.line, n.column)):
            if found.name not in found_params and found.name not in known:
                raise CostModelError(
                    f"{source}:{found.line}:{found.column}: unknown name {found.name!r}: not a param and not a metric "
                    f"(metrics: {', '.join(sorted(known))})"
                )
        return cls(
            name=name, expression=expression, params=found_params, metrics=known, description=description, source=source
        )

    @property
    def names(self) -> frozenset[str]:
        """Metric names the expression uses."""
        return frozenset(n.name for n in names(self.expression) if n.name not in self.params)

    def formula(self) -> str:
        return render(self.expression)

    @property
    def semantic(self) -> frozenset[str]:
        """Metrics the expression uses that are not declared structural (``similarity``, most user metrics)."""
        return frozenset(n for n in self.names if structure_of(self.metrics[n]) is None)

    def directions(self) -> dict[str, Direction]:
        """How the cost moves with each structural field it depends on (:mod:`nlqo.optimizer.cost.shape`).

        >>> load_cost_model("structural").directions()
        {'edges': -1, 'height': 1, 'imbalance': 1, 'size': -1}
        >>> CostModel.parse("cost = abs(depth - 2) - leaves").directions()
        {'height': None, 'leaves': -1}
        """
        out: dict[str, Direction] = {}
        for name, sign in sorted(signs(self.expression, self.params).items()):
            structure = structure_of(self.metrics[name])
            if structure is None:
                continue
            out = merge(out, {f: (None if sign is None else sign * d) for f, d in structure.directions.items()})
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
        return evaluate(self.expression, {**values, **self.params})

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

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
from nlqo.ir.syntax import pointer
from nlqo.optimizer.plan import Cost, Tree
from nlqo.common.paths import read_text
from nlqo.common.resources import builtin_dir, find


@functools.cache
def _parser() -> lark.Lark:
    return lark.Lark((builtin_dir("grammar") / "cost.lark").read_text(), parser="lalr", propagate_positions=True)


class _At(Exception):
    """A mistake the transformer found at a line and column of the text (made a :class:`CostModelError` by
    :meth:`CostModel.parse`, which knows the file and the text)."""

    def __init__(self, line: int, column: int, message: str):
        super().__init__(message)
        self.line, self.column, self.message = line, column, message


def _located(source: str, text: str, line: object, column: object, message: str) -> CostModelError:
    """``SOURCE:LINE:COLUMN: message``, then the line and a caret under the column (``SOURCE: message``
    when there is no position).

    >>> print(_located("m.cost", "cost = depth ) a", 1, 14, "unexpected ')'"))
    m.cost:1:14: unexpected ')'
      cost = depth ) a
                   ^
    """
    if not (isinstance(line, int) and isinstance(column, int) and line > 0):
        return CostModelError(f"{source}: {message}")
    return CostModelError(f"{source}:{line}:{column}: {message}\n{pointer(_line_at(text, line), column)}")


class _ToExpr(lark.Transformer):
    """Parse tree -> :mod:`nlqo.optimizer.cost.expr` nodes."""

    def number(self, items):
        return Num(_finite(items[0]))

    def name(self, items):
        return Name(str(items[0]), items[0].line, items[0].column)

    def call(self, items):
        fn = items[0]
        if str(fn) not in FUNCTIONS:
            raise _At(fn.line, fn.column, f"unknown function {str(fn)!r} (known: {', '.join(FUNCTIONS)})")
        least, most = ARITY[str(fn)]
        given = len(items) - 1
        if given < least or (most is not None and given > most):
            wanted = f"{least}" if least == most else f"at least {least}"
            raise _At(fn.line, fn.column, f"{str(fn)}() takes {wanted} argument{'s' * (wanted != '1')}, not {given}")
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


MAX_NESTING = 100
"""Operations a formula may nest (parentheses do not count). The syntax tree is transformed, evaluated
and rendered recursively; a deeper one (``cost = ---...---depth``, 3,000 signs, found by fuzzing) ran
out of Python's stack: a RecursionError, an internal error."""


def _depth(tree: lark.Tree) -> int:
    """Levels of ``tree``, counted without recursion.

    >>> _depth(_parser().parse("cost = -(-depth) + 1").children[0])
    5
    """
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node.children if isinstance(child, lark.Tree))
    return deepest


def _finite(token: lark.Token) -> float:
    """A number of the cost language; one too large for a float (``1e999``) is refused."""
    value = float(token)
    if not math.isfinite(value):
        raise _At(token.line, token.column, f"{str(token)} is too large a number")
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
            line, col = getattr(exc, "line", None), getattr(exc, "column", None)
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
            if isinstance(exc, lark.UnexpectedCharacters):
                char = text[exc.pos_in_stream : exc.pos_in_stream + 1]
                what = f"unexpected {char!r}"
                if char == '"':
                    what = 'a string that does not end: close it with " on the same line'
            raise _located(source, text, line, col, f"cannot read the cost model here ({what})") from None
        for st in tree.children:
            if isinstance(st, lark.Tree) and (nested := _depth(st) - 2) > MAX_NESTING:  # less the statement and a leaf
                message = (
                    f"the formula nests {nested} operations deep (a sum or product of that many terms, or that many "
                    f"signs), more than the {MAX_NESTING} a cost model may"
                )
                raise _located(source, text, st.meta.line, st.meta.column, message)
        try:
            statements = [st for st in _ToExpr().transform(tree).children if st is not None]  # None: an empty file
        except lark.exceptions.VisitError as exc:
            if isinstance(exc.orig_exc, _At):
                raise _located(source, text, exc.orig_exc.line, exc.orig_exc.column, exc.orig_exc.message) from None
            raise exc.orig_exc from None
        known = registry(metrics)
        found_params: dict[str, float] = {}
        description, expression, first = "", None, 0
        for st in statements:
            if st.data == "param":
                found_params[str(st.children[0])] = st.children[1]
            elif st.data == "description":
                token = st.children[0]
                try:
                    description = json.loads(str(token))
                except ValueError as exc:  # an escape JSON does not have: "a\q"
                    what, at = getattr(exc, "msg", str(exc)), getattr(exc, "pos", 0)
                    message = f'malformed string ({what}); escapes are those of JSON: \\\\ \\" \\n \\t \\uXXXX'
                    raise _located(source, text, token.line, (token.column or 1) + at, message) from None
            else:
                if expression is not None:
                    raise _located(
                        source,
                        text,
                        st.meta.line,
                        st.meta.column,
                        f"a second 'cost =' statement (the first is on line {first}); a cost model has one",
                    )
                expression, first = st.children[0], st.meta.line
        if expression is None:
            raise CostModelError(f"{source}: no 'cost = ...' statement; add one, e.g. cost = depth - size")
        found_params.update(params or {})
        for found in sorted(names(expression), key=lambda n: (n.name, n.line, n.column)):
            if found.name not in found_params and found.name not in known:
                raise _located(
                    source,
                    text,
                    found.line,
                    found.column,
                    f"unknown name {found.name!r}: not a param and not a metric (metrics: {', '.join(sorted(known))}); "
                    f"declare a param with 'param {found.name} = NUMBER', or register a Python metric under the "
                    "entry point group nlqo.metrics (docs/cost-models.md)",
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
    text = read_text(file, "a cost-model file (.cost)")
    return CostModel.parse(text, name=file.stem, source=str(file), metrics=metrics, params=params)

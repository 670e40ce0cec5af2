"""The cost-model language's syntax tree: immutable nodes and the four things done with them
(names, evaluation, monotonic direction, text), each one ``match`` over the node types.

>>> e = BinOp("-", Name("depth"), BinOp("*", Name("alpha"), Name("size")))
>>> render(e), evaluate(e, {"depth": 3.0, "alpha": 2.0, "size": 1.0})
('depth - alpha * size', 1.0)
>>> signs(e, {"alpha": 2.0})
{'depth': 1, 'size': -1}

Arithmetic is that of floats, made total and ordered (docs/cost-models.md, "Arithmetic"): a value
too large for a float is ``inf`` or ``-inf`` and compares as such, and a formula with a step that has
no value (x / 0, log of 0 or of a negative number, a NaN such as inf - inf) is ``+inf`` as a whole,
the worst cost, whatever surrounds that step:

>>> evaluate(BinOp("-", Num(0.0), BinOp("/", Num(1.0), Name("depth"))), {"depth": 0.0})
inf
>>> evaluate(Call("log", (Name("depth"),)), {"depth": 0.0}), evaluate(BinOp("*", Num(1e300), Num(1e300)), {})
(inf, inf)
"""

from __future__ import annotations

import math
from typing import Callable, Literal, Mapping

import attrs

Direction = int | None
"""+1: the cost never decreases as the quantity grows; -1: never increases; None: either (unknown)."""

Operator = Literal["+", "-", "*", "/"]

FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": lambda *args: min(args),  # min(x) is x, as max(x) is
    "max": lambda *args: max(args),
    "abs": abs,
    "log": math.log,
}
ARITY: dict[str, tuple[int, int | None]] = {"min": (1, None), "max": (1, None), "abs": (1, 1), "log": (1, 1)}
"""Each function's least and most arguments (None: any number)."""
MONOTONE = frozenset({"min", "max"})
"""Functions that never decrease as any argument grows (``abs`` does not qualify, nor ``log``: log(0) has no
value, so the formula is +inf there, above log(1) = 0)."""


@attrs.frozen
class Num:
    value: float


@attrs.frozen
class Name:
    """A parameter or metric; ``line`` and ``column`` point at it in the source, for messages."""

    name: str
    line: int = attrs.field(default=0, eq=False)
    column: int = attrs.field(default=0, eq=False)


@attrs.frozen
class Neg:
    operand: "Expr"


@attrs.frozen
class BinOp:
    op: Operator
    left: "Expr"
    right: "Expr"


@attrs.frozen
class Call:
    function: str
    args: tuple["Expr", ...]


Expr = Num | Name | Neg | BinOp | Call


def names(expr: Expr) -> list[Name]:
    """Every name in ``expr``, in source order, repeats included."""
    match expr:
        case Num():
            return []
        case Name():
            return [expr]
        case Neg(operand):
            return names(operand)
        case BinOp(_, left, right):
            return names(left) + names(right)
        case Call(_, args):
            return [n for a in args for n in names(a)]
    raise TypeError(f"not a cost expression: {expr!r}")


class _NoValue(Exception):
    """A step of a formula that has no value; the whole formula is then +inf."""


def evaluate(expr: Expr, env: Mapping[str, float]) -> float:
    """The value of ``expr`` with every name taken from ``env``: a float, never NaN. A formula with a
    step that has no value (x / 0, a function outside its domain such as log(0), any NaN: inf - inf,
    0 * inf, a metric that gave NaN) is +inf as a whole; values too large for a float are +-inf."""
    try:
        return _value(expr, env)
    except _NoValue:
        return math.inf


def _number(x: float) -> float:
    if x != x:  # NaN
        raise _NoValue
    return x


def _value(expr: Expr, env: Mapping[str, float]) -> float:
    match expr:
        case Num(value):
            return _number(value)
        case Name(name):
            return _number(float(env[name]))
        case Neg(operand):
            return -_value(operand, env)
        case Call(function, args):
            values = [_value(a, env) for a in args]
            try:
                return _number(float(FUNCTIONS[function](*values)))
            except (ValueError, ZeroDivisionError, OverflowError):  # outside the function's domain: log(0)
                raise _NoValue from None
        case BinOp(op, left, right):
            a, b = _value(left, env), _value(right, env)
            match op:
                case "+":
                    return _number(a + b)
                case "-":
                    return _number(a - b)
                case "*":
                    return _number(a * b)
                case "/":
                    if not b:
                        raise _NoValue
                    return _number(a / b)
    raise TypeError(f"not a cost expression: {expr!r}")


def merge(a: Mapping[str, Direction], b: Mapping[str, Direction]) -> dict[str, Direction]:
    """Directions of a sum: a name both sides move the same way keeps it, otherwise unknown."""
    out = dict(a)
    for name, d in b.items():
        out[name] = d if name not in out or out[name] == d else None
    return out


def _scaled(directions: Mapping[str, Direction], factor: float) -> dict[str, Direction]:
    if factor == 0:  # 0 * x is 0, but +inf where x is infinite (0 * inf has no value): unknown
        return _unknown(directions)
    return {n: (None if d is None else d * (1 if factor > 0 else -1)) for n, d in directions.items()}


def _unknown(*parts: Mapping[str, Direction]) -> dict[str, Direction]:
    return {n: None for p in parts for n in p}


def _constant(expr: Expr, params: Mapping[str, float]) -> bool:
    """Whether ``expr`` names only parameters (its value is fixed)."""
    return all(n.name in params for n in names(expr))


def signs(expr: Expr, params: Mapping[str, float]) -> dict[str, Direction]:
    """How ``expr`` moves with each name that is not a parameter (parameters are constants).

    >>> signs(BinOp("/", Call("max", (Name("a"), Name("c"))), Num(4.0)), {})
    {'a': 1, 'c': 1}
    >>> signs(BinOp("*", Name("a"), Name("b")), {})
    {'a': None, 'b': None}
    """
    match expr:
        case Num():
            return {}
        case Name(name):
            return {} if name in params else {name: 1}
        case Neg(operand):
            return _scaled(signs(operand, params), -1)
        case Call(function, args):
            parts = [signs(a, params) for a in args]
            if function not in MONOTONE:
                return _unknown(*parts)
            out: dict[str, Direction] = {}
            for part in parts:
                out = merge(out, part)
            return out
        case BinOp(op, left_expr, right_expr):
            left, right = signs(left_expr, params), signs(right_expr, params)
            match op:
                case "+":
                    return merge(left, right)
                case "-":
                    return merge(left, _scaled(right, -1))
                case "*" if _constant(left_expr, params):
                    return _scaled(right, evaluate(left_expr, params))
                case "*" if _constant(right_expr, params):
                    return _scaled(left, evaluate(right_expr, params))
                case "/" if _constant(right_expr, params):  # division by a constant
                    divisor = evaluate(right_expr, params)
                    return _scaled(left, 1 / divisor) if divisor else {}  # x / 0: +inf whatever x is
            return _unknown(left, right)
    raise TypeError(f"not a cost expression: {expr!r}")


PRECEDENCE: dict[str, int] = {"+": 1, "-": 1, "*": 2, "/": 2}


def render(expr: Expr, outer: int = 0, right: bool = False) -> str:
    """Expression text with only the parentheses it needs.

    >>> render(BinOp("-", Name("a"), BinOp("-", Name("b"), Name("c"))))
    'a - (b - c)'
    """
    match expr:
        case Num(value):
            short = f"{value:g}"  # every digit kept where 6 significant ones would round: 1234567, 0.1234567
            return short if float(short) == value else repr(value).removesuffix(".0")
        case Name(name):
            return name
        case Neg(operand):
            return f"-{render(operand, 3)}"
        case Call(function, args):
            return f"{function}({', '.join(render(a) for a in args)})"
        case BinOp(op, left, right_expr):
            level = PRECEDENCE[op]
            body = f"{render(left, level)} {op} {render(right_expr, level, right=True)}"
            return f"({body})" if level < outer or (right and level == outer) else body
    raise TypeError(f"not a cost expression: {expr!r}")

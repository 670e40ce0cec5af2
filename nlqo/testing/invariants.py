"""Invariant checkers for plans, cost models and metrics. Each raises :class:`InvariantError`
(an ``AssertionError``, so test runners report it as a failure) saying what does not hold."""

from __future__ import annotations

import ast
import math
import random
from typing import Callable, Mapping, Sequence

import attrs

from nlqo.optimizer.cost import CostContext, CostModel
from nlqo.optimizer.cost.metrics import Metric, structure_of
from nlqo.optimizer.cost.shape import FIELDS, Shape, shape_of
from nlqo.ir import Query, Var
from nlqo.kinds import RelationKind
from nlqo.common.passages import Embedder
from nlqo.optimizer.plan import ROOT, Plan, Tree


class InvariantError(AssertionError):
    """A plan, cost model or metric breaks an invariant; the message says which and where."""


def _fail(message: str) -> None:
    raise InvariantError(message)


def check_plan(plan: Plan, *, source: Query | None = None) -> Plan:
    """Check the invariants every plan keeps, and return it.

    * a tree rooted at the question over the kept atoms: each placed atom once, every parent
      chain reaching the root (so no cycle), every placed atom in the plan's query;
    * only edges the pair relations allow (read from ``plan.relations``, not from the optimizer's
      join graph), so no ``none`` or ``sibling`` pair is parent and child;
    * pins respected: an atom pinned under a parent hangs under it;
    * the answer at the root: each child of the root is an answer atom, mentions an answer
      variable or is pinned as the sibling of one that does, and an answer atom that is not
      pinned under another hangs under the root unless it is left out;
    * every atom accounted for: each atom of the plan's query (and of ``source``, the query before
      the rewrite rules, when given) is placed or left out with a reason, never both.
    """
    q, tree = plan.query, plan.tree
    if tree.root != ROOT:
        _fail(f"the root is {tree.root!r}, not {ROOT!r}")
    parent = dict(tree.parent)
    if len(parent) != len(tree.parent):
        _fail("an atom appears twice in the tree")
    ids = set(q.ids)
    for node in parent:
        if node not in ids:
            _fail(f"{node} is in the tree but not in the plan's query")
        seen = {node}
        up = node
        while up != ROOT:
            nxt = parent.get(up)
            if nxt is None:
                _fail(f"{up}'s parent chain does not reach the root")
            if nxt in seen:
                _fail(f"the tree has a cycle through {nxt}")
            seen.add(nxt)  # type: ignore[arg-type]
            up = nxt  # type: ignore[assignment]
    for r in q.relations:
        if r.kind == RelationKind.PARENT and r.right in parent and parent[r.right] != r.left:
            _fail(f"pin 'relation {r.left} parent {r.right}' not kept: {r.right} hangs under {parent[r.right]}")
        if r.kind != RelationKind.PARENT and (parent.get(r.right) == r.left or parent.get(r.left) == r.right):
            _fail(f"pin 'relation {r.left} {r.kind} {r.right}' not kept: one hangs under the other")
    answer_vars = {t.name for t in q.answer if isinstance(t, Var)}
    answer_ids = {t for t in q.answer if isinstance(t, str)}
    on_top = tree.children.get(ROOT, ())
    sibling_of = {(r.left, r.right) for r in q.relations if r.kind == RelationKind.SIBLING}
    carries = {a.id for a in q.atoms if a.id in answer_ids or a.variables & answer_vars}
    while extra := {b for a, b in sibling_of if a in carries} | {a for a, b in sibling_of if b in carries}:
        if extra <= carries:
            break
        carries |= extra
    for child in on_top:
        if child not in carries:
            _fail(
                f"{child} hangs under the root but is no answer atom, mentions no answer variable and is pinned as no one's sibling that does"
            )
    # Read from the relations here, not from the optimizer's join graph: a checker that shared the
    # optimizer's code would share its bugs. (The root's children are checked above.)
    for child, par in tree.parent:
        if par != ROOT and (kind := _relation(plan, par, child)) != RelationKind.PARENT:
            _fail(f"edge {par} -> {child} is not allowed by the relations ({par} {kind} {child})")
    left_ids = [x.id for x in plan.left_out]
    if len(left_ids) != len(set(left_ids)):
        _fail(f"an atom is left out twice: {left_ids}")
    left = set(left_ids)
    for target in answer_ids:
        if (
            target not in on_top
            and target not in left
            and target in ids
            and target not in {r.right for r in q.relations}
        ):
            _fail(f"answer atom {target} is neither under the root nor left out")
    for x in plan.left_out:
        if not x.reason:
            _fail(f"{x.id} is left out without a reason")
    if placed_and_left := set(parent) & left:
        _fail(f"{sorted(placed_and_left)} are both placed and left out")
    for query in (q, source):
        if query is not None and (missing := set(query.ids) - set(parent) - left):
            _fail(f"{sorted(missing)} are neither placed nor left out")
    return plan


def _relation(plan: Plan, a: str, b: str) -> RelationKind:
    """How ``a`` relates to ``b`` by the plan's relations (``none`` when they say nothing)."""
    if (a, b) in plan.relations:
        return RelationKind(plan.relations[(a, b)])
    return RelationKind(plan.relations.get((b, a), RelationKind.NONE)).flip()


def check_cost_deterministic(model: CostModel, plan: Plan, *, embedder: Embedder | None = None, seed: int = 0) -> float:
    """Evaluate ``model`` on ``plan``'s tree twice from inputs rebuilt independently - a fresh
    context, the relations in another order, the tree built from its edges in another order -
    and check both agree with each other and with the cost the plan reports. Returns the total.

    A metric that depends on dict order, object identity or a cache shared across contexts fails
    here even when two calls on the same objects agree.
    """
    rng = random.Random(seed)
    first = model.evaluate(plan.tree, CostContext(plan.query, dict(plan.relations), embedder))
    edges = list(plan.tree.parent)
    rng.shuffle(edges)
    pairs = list(plan.relations.items())
    rng.shuffle(pairs)
    rebuilt = Tree.build(plan.tree.root, dict(edges), plan.tree.order)
    second = model.evaluate(rebuilt, CostContext(attrs.evolve(plan.query), dict(pairs), embedder))
    if (first.total, dict(first.terms)) != (second.total, dict(second.terms)):
        _fail(f"cost model {model.name!r} gives {first} and then {second} on the same plan")
    if abs(first.total - plan.cost.total) > 1e-9 * max(1.0, abs(first.total)):
        _fail(f"the plan reports cost {plan.cost.total}, the model gives {first.total}")
    return first.total


_OPERATORS: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,  # x / 0 raises ZeroDivisionError: no value
}
_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": lambda *args: min(args),  # min(x) is x: Python's min(x) wants an iterable
    "max": lambda *args: max(args),
    "abs": abs,
    "log": math.log,
}


def _second_opinion(node: ast.AST, env: Mapping[str, float]) -> float:
    """Python's own parse of a rendered cost formula, evaluated here: a second implementation
    that shares nothing with :func:`nlqo.optimizer.cost.expr.evaluate`. By the rules of
    docs/cost-models.md ("Arithmetic"), a formula with a step that has no value is +inf."""
    try:
        return _step(node, env)
    except (ZeroDivisionError, ValueError):  # x / 0, log(0), a NaN
        return math.inf


def _step(node: ast.AST, env: Mapping[str, float]) -> float:
    match node:
        case ast.Expression(body):
            value = _step(body, env)
        case ast.Constant(value) if isinstance(value, (int, float)):
            value = float(value)
        case ast.Name(id):
            value = float(env[id])
        case ast.UnaryOp(ast.USub(), operand):
            value = -_step(operand, env)
        case ast.BinOp(left, op, right):
            value = _OPERATORS[type(op)](_step(left, env), _step(right, env))
        case ast.Call(ast.Name(name), args):
            value = float(_FUNCTIONS[name](*(_step(a, env) for a in args)))
        case _:
            raise InvariantError(f"cannot read {ast.dump(node)} in a rendered cost formula")
    if math.isnan(value):  # inf - inf, 0 * inf, a metric's NaN: no value
        raise ValueError("NaN")
    return value


def check_cost_formula(model: CostModel, plan: Plan, *, embedder: Embedder | None = None) -> float:
    """The plan's cost, recomputed from its terms by a second evaluator of the model's formula,
    agrees with the cost model's own evaluation; so does each parameter changed with
    ``with_params`` (a parameter that does not take effect is seen). Returns the total."""
    ctx = CostContext(plan.query, dict(plan.relations), embedder)
    formula = ast.parse(model.formula(), mode="eval")
    changes: list[dict[str, float]] = [{}] + [{name: value + 1.5} for name, value in sorted(model.params.items())]
    for params in changes:
        variant = model.with_params(**params) if params else model
        cost = variant.evaluate(plan.tree, ctx)
        expected = _second_opinion(formula, {**cost.terms, **model.params, **params})
        if not math.isclose(cost.total, expected, rel_tol=1e-9, abs_tol=1e-9):
            shown = f" with {params}" if params else ""
            _fail(
                f"cost model {model.name!r}{shown} gives {cost.total}; its formula {model.formula()} gives {expected}"
            )
    return model.evaluate(plan.tree, ctx).total


def check_monotone(metric: Metric, shape: Shape, field: str, step: int = 1) -> None:
    """Check a structural metric's declared direction in ``field`` at ``shape``: growing the field
    by ``step`` must move the value the declared way, and an undeclared field must not move it."""
    structure = structure_of(metric)
    if structure is None:
        _fail(
            f"{getattr(metric, '__name__', metric)!r} is not declared structural (use nlqo.optimizer.cost.structural)"
        )
        return
    if field not in FIELDS:
        _fail(f"unknown field {field!r} (fields: {', '.join(FIELDS)})")
    before = structure.of_shape(shape)
    after = structure.of_shape(attrs.evolve(shape, **{field: getattr(shape, field) + step}))
    declared: Mapping[str, int] = structure.directions
    name = getattr(metric, "__name__", "metric")
    if field not in declared:
        if after != before:
            _fail(f"{name} moves with {field} ({before} -> {after}) but does not declare it")
    elif declared[field] * (after - before) < 0:
        _fail(
            f"{name} declares direction {declared[field]:+d} in {field} but goes {before} -> {after} when it grows by {step}"
        )


def check_declarations(model: CostModel, plan: Plan, *, steps: Sequence[int] = (1, 2)) -> None:
    """Every structural metric ``model`` reads moves as it declares, measured where plans are: at the
    structural summary of ``plan``'s tree and of each of its subtrees, each field grown by each of
    ``steps`` (:func:`check_monotone`). The search prunes by the declarations, so one that names the
    wrong field, the wrong sign or too few fields can cost an optimal plan; this finds it on any plan,
    also where no query of a corpus shows the wrong plan."""
    ctx = CostContext(plan.query, dict(plan.relations))
    tree = plan.tree

    def siblings(a: str, b: str) -> bool:
        return ctx.relation(a, b) == RelationKind.SIBLING

    shapes = sorted({shape_of(n, tree.children, siblings, synthetic_root=ROOT) for n in tree.nodes}, key=repr)
    for name in sorted(model.names):
        if structure_of(model.metrics[name]) is None:
            continue
        for shape in shapes:
            for field in FIELDS:
                for step in steps:
                    check_monotone(model.metrics[name], shape, field, step)

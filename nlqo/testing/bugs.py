"""A catalogue of seeded optimizer bugs, and the sweep that shows the public kit catches each one.

Each :class:`SeededBug` is a small change to the source of one engine function, of the kind a
contributor could make: the cycle check dropped, a pin ignored, a cost sign flipped. :func:`seeded`
applies one for the length of a ``with`` block (the function is recompiled from the changed source
and put in place of the original wherever nlqo holds it); the optimizer's own ``verify`` step is
switched off meanwhile, so only the kit's checks count. :func:`sweep` runs every public check of
:mod:`nlqo.testing` (the invariant checkers and the metamorphic oracles) over a small corpus of
queries and cost models and returns what failed. docs/testing.md has the table of which check
catches which bug; ``tests/test_seeded_bugs.py`` proves every one is caught.

>>> [b.name for b in BUGS][:3]
['pin ignored', 'none pair attached', 'non-answer atom under the root']
>>> sweep() == []  # the engine as it is: no check fails
True
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import sys
import textwrap
from typing import Callable, Iterator
from unittest import mock

import attrs

from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.ir import Query, Relation
from nlqo.kinds import RelationKind
from nlqo.ir.syntax import parse
from nlqo.testing.fakes import HashEmbedder
from nlqo.testing.invariants import check_cost_deterministic, check_cost_formula, check_plan
from nlqo.testing.oracles import (
    CacheFiller,
    check_invariance,
    check_merge_context,
    check_optimal,
    check_relation_cache_round_trip,
    check_search_monotone,
)
from nlqo.testing.strategies import chain, plan, star
from nlqo.testing.world import MOVIES, check_differential


@attrs.frozen
class SeededBug:
    """One named bug: in ``function`` (``module:qualname``), ``original`` becomes ``mutant``."""

    name: str
    what: str
    function: str
    original: str
    mutant: str
    caught_by: str
    """The kit's check that catches it (the first in :data:`CHECKS` order)."""


BUGS: tuple[SeededBug, ...] = (
    SeededBug(
        "pin ignored",
        "a pinned parent no longer restricts where its child may hang",
        "nlqo.optimizer.graph:join_graph",
        "if r.kind == RelationKind.PARENT and r.left in index and r.right in index",
        "if r.kind == 'ignored' and r.left in index and r.right in index",
        "check_plan",
    ),
    SeededBug(
        "none pair attached",
        "a pair the relations call none may be parent and child",
        "nlqo.optimizer.graph:join_graph",
        "if kind == RelationKind.PARENT:",
        "if kind in (RelationKind.PARENT, RelationKind.NONE):",
        "check_plan",
    ),
    SeededBug(
        "non-answer atom under the root",
        "any reachable atom may hang under the question, not only those holding the answer",
        "nlqo.optimizer.graph:join_graph",
        "if d == 0:",
        "if d is not None:",
        "check_plan",
    ),
    SeededBug(
        "dropped atom not reported",
        "atoms the rewrite rules dropped are missing from the plan's left-out list",
        "nlqo.optimizer.optimizer:Optimizer.optimize",
        "left_out=program.left_out + left_out,",
        "left_out=left_out,",
        "check_plan",
    ),
    SeededBug(
        "left-out reason lost",
        "an atom no valid tree includes is left out without its reason",
        "nlqo.optimizer.optimizer:Optimizer._left_out",
        "LeftOut(a, _why_left_out(a, placed, graph), q.atom(a).text())",
        'LeftOut(a, "", q.atom(a).text())',
        "check_plan",
    ),
    SeededBug(
        "cost sign flipped",
        "a subtraction in a cost formula adds",
        "nlqo.optimizer.cost.expr:_value",
        "return _number(a - b)",
        "return _number(a + b)",
        "check_cost_formula",
    ),
    SeededBug(
        "dominance reversed",
        "the DP keeps the sub-plan that another one dominates",
        "nlqo.optimizer.dp:_insert",
        "if e_eq == eq and all(x <= y for x, y in zip(e_vec, vec)):",
        "if e_eq == eq and all(x >= y for x, y in zip(e_vec, vec)):",
        "check_optimal",
    ),
    SeededBug(
        "greedy labelled exact",
        "a plan from the greedy fallback says it is exact",
        "nlqo.optimizer.optimizer:Optimizer._search",
        "exact=not because,",
        "exact=not model.semantic,",
        "check_optimal",
    ),
    SeededBug(
        "beam cut hidden",
        "sub-plans the beam cut are not counted, so the plan claims to be exact",
        "nlqo.optimizer.dp:_insert",
        "return kept[:beam], len(kept) - beam",
        "return kept[:beam], 0",
        "check_search_monotone",
    ),
    SeededBug(
        "alpha ignored",
        "a cost model's parameter overrides (--param alpha=5) do not take effect",
        "nlqo.optimizer.cost.model:CostModel.with_params",
        "params={**self.params, **params}",
        "params={**params, **self.params}",
        "check_cost_formula",
    ),
    SeededBug(
        "budget off by one",
        "the DP gives up one sub-plan pair before its budget",
        "nlqo.optimizer.dp:search",
        "if pairs > budget:",
        "if pairs >= budget:",
        "check_search_monotone",
    ),
    SeededBug(
        "stale relation-cache entry",
        "a cached pair read the other way round is not flipped",
        "nlqo.optimizer.relations:RelationCache.get",
        "return flip(kind)",
        "return RelationKind(kind)",
        "check_relation_cache_round_trip",
    ),
    SeededBug(
        "merge check shown the wrong plan",
        "the context-aware merge check's prompt gets no partial plan",
        "nlqo.optimizer.optimizer:Optimizer._check_merges",
        'question=q.question or "", tree=plan_text,',
        'question=q.question or "", tree="",',
        "check_merge_context",
    ),
    SeededBug(
        "merge check skipped",
        "a rejected merge is ignored: the plan keeps the edge",
        "nlqo.optimizer.optimizer:Optimizer._check_merges",
        'if verdict == "no":',
        'if verdict == "never":',
        "check_merge_context",
    ),
    SeededBug(
        "tree puts the wrong value in",
        "a tree node's question gets its child's question instead of the child's answer",
        "nlqo.execution.tree:substitute",
        "values[next(iter(shared))] = child.answer",
        "values[next(iter(shared))] = child.question",
        "check_differential",
    ),
    SeededBug(
        "plan steps out of order",
        "the linear template walks a lowered plan's atoms root first instead of leaves first",
        "nlqo.planner.lower:lower",
        "for n in plan.tree.postorder() if n != ROOT)",
        "for n in reversed(list(plan.tree.postorder())) if n != ROOT)",
        "check_differential",
    ),
    SeededBug(
        "merge checks miscounted",
        "the count of merge checks goes down instead of up",
        "nlqo.optimizer.optimizer:Optimizer._check_merges",
        "checks += 1",
        "checks -= 1",
        "check_merge_context",
    ),
)
"""Every seeded bug, in the order docs/testing.md lists them."""


def _source_node(module, qualname: str) -> tuple[ast.AST, list[str]]:
    """The AST node of ``qualname`` in ``module``'s source, and the source lines."""
    source = inspect.getsource(module)
    tree = ast.parse(source)
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(
            n
            for n in ast.iter_child_nodes(node)
            if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.name == part
        )
    return node, source.splitlines(keepends=True)


def _mutated(bug: SeededBug) -> tuple[object, str, Callable]:
    """The object the function lives on, its attribute name, and the function recompiled with the bug."""
    module_name, qualname = bug.function.split(":")
    module = importlib.import_module(module_name)
    node, lines = _source_node(module, qualname)
    text = textwrap.dedent("".join(lines[node.lineno - 1 - len(node.decorator_list) : node.end_lineno]))  # type: ignore[attr-defined]
    original, mutant = bug.original, bug.mutant
    if "\n" in original:  # a multi-line snippet: match it at any indent
        indent = next(
            line[: len(line) - len(line.lstrip())]
            for line in text.splitlines()
            if line.strip() == original.splitlines()[0].strip()
        )
        original = textwrap.indent(original, indent).lstrip()
        mutant = textwrap.indent(mutant, indent).lstrip()
    if text.count(original) != 1:
        raise ValueError(
            f"seeded bug {bug.name!r}: {bug.original!r} occurs {text.count(original)} times in {bug.function}"
        )
    namespace = dict(vars(module))
    exec(compile(text.replace(original, mutant), f"<{bug.function} seeded: {bug.name}>", "exec"), namespace)
    *owners, name = qualname.split(".")
    new = namespace[name]
    host: object = module
    for owner in owners:
        host = getattr(host, owner)
    return host, name, new


@contextlib.contextmanager
def seeded(bug: SeededBug) -> Iterator[None]:
    """Run the block with ``bug`` in the engine (and the optimizer's own ``verify`` off)."""
    host, name, new = _mutated(bug)
    old = inspect.getattr_static(host, name)
    with contextlib.ExitStack() as stack:
        holders = (
            [host]
            if not inspect.ismodule(host)
            else [
                m
                for m in list(sys.modules.values())
                if m is not None and m.__name__.startswith("nlqo") and getattr(m, name, None) is old
            ]
        )
        for holder in holders:
            stack.enter_context(mock.patch.object(holder, name, new))
        stack.enter_context(mock.patch("nlqo.optimizer.optimizer.verify", lambda plan, graph=None: plan))
        yield


CORPUS: tuple[tuple[str, Query], ...] = (
    ("chain of 4", chain(4)),
    ("star of 4", star(4)),
    ("star of 5", star(5)),
    ("star of 4 with a pin", attrs.evolve(star(4), relations=(Relation("q2", RelationKind.PARENT, "q3"),))),
    (
        "pinned comparison",
        parse(
            'question "Which came first, Jaws or Alien?"\n'
            'q1 = (?f1, "released in", ?y1)\nq2 = (?f2, "released in", ?y2)\nq3 = (?f1, "title", "Jaws")\n'
            'q4 = (?f2, "title", "Alien")\nq5 = (?first, "came before", ?other)\n'
            "relation q5 parent q1\nrelation q5 parent q2\nrelation q1 parent q3\nrelation q2 parent q4\nanswer ?first\n"
        ),
    ),
    (
        "bridge with a pin and an unreachable atom",
        parse(
            'question "In which country is the city where the director of Jaws was born the capital?"\n'
            'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nq3 = (?c, "capital of", ?n)\n'
            'q4 = (?x, "directed", "Alien")\nrelation q2 parent q1\nrelation q4 none q1\nanswer ?c\n'
        ),
    ),
    (
        "siblings and a duplicate",
        parse(
            'q1 = (?b, "formed in", ?city)\nq2 = (?b, "released", "Counterparts")\nq3 = (?b, "released", "Counterparts")\n'
            'q4 = (?city, "lies in", ?country)\nrelation q1 sibling q2\nanswer ?city\n'
        ),
    ),
)
"""Queries the sweep plans: chains, stars, pins of every kind, a duplicate and an unreachable atom."""

MODELS: tuple[CostModel, ...] = (
    load_cost_model("structural"),
    CostModel.parse("cost = imbalance - depth - edges", name="deep"),
    CostModel.parse("cost = depth + 2 * imbalance - size", name="bushy"),
    CostModel.parse("cost = abs(depth - 2) + imbalance - edges", name="two-deep"),
)
"""Cost models the sweep plans under: the shipped structural one, one that favours deep trees
(so LLM-decided edges are used), one that favours bushy ones, and one that wants depth two (its
``abs`` moves both ways, so the DP must keep more sub-plans)."""
SIMILAR = load_cost_model("default")
"""The shipped default model (its similarity term, embedded by :class:`HashEmbedder`)."""


@attrs.frozen
class Catch:
    """A check that failed: which, on what, and its message."""

    check: str
    case: str
    message: str


def _plans(query: Query, model: CostModel) -> Iterator:
    from nlqo.optimizer.optimizer import Optimizer

    yield Optimizer(cost_model=model).optimize(query)  # the default rewrite rules, no LLM
    yield plan(query, cost_model=model, seed=0)  # no rules, a stand-in LLM for undecided pairs
    yield Optimizer(cost_model=model, rules=(), budget=3).optimize(query)  # the greedy fallback
    yield Optimizer(cost_model=model, rules=(), beam=1).optimize(query)  # a beam that cuts
    yield Optimizer(cost_model=model, rules=(), llm=CacheFiller()).optimize(query)  # one-way LLM relations


def _plan_checks(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_plan(p, source=query)


def _optimality(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_optimal(p, model)


def _determinism(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_cost_deterministic(model, p)
    p = plan(query, cost_model=SIMILAR, seed=0, embedder=HashEmbedder())
    check_cost_deterministic(SIMILAR, p, embedder=HashEmbedder())


def _formula(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_cost_formula(model, p)
    check_cost_formula(
        SIMILAR, plan(query, cost_model=SIMILAR, seed=0, embedder=HashEmbedder()), embedder=HashEmbedder()
    )


CHECKS: tuple[tuple[str, Callable[[Query, CostModel], None]], ...] = (
    ("check_plan", _plan_checks),
    ("check_optimal", _optimality),
    ("check_cost_deterministic", _determinism),
    ("check_cost_formula", _formula),
    ("check_invariance", lambda q, m: check_invariance(q, m)),
    ("check_search_monotone", lambda q, m: check_search_monotone(q, m)),
    ("check_relation_cache_round_trip", lambda q, m: check_relation_cache_round_trip(q, m)),
    ("check_merge_context", lambda q, m: check_merge_context(q, m)),
)
"""The public kit's checks, in the order the sweep runs them."""


def _cases() -> Iterator[tuple[str, str, Callable[[], object]]]:
    """(check, case, run) for every check of the kit on every case it takes."""
    for check_name, check in CHECKS:
        for case, query in CORPUS:
            for model in MODELS:
                yield check_name, f"{case} / {model.name}", lambda c=check, q=query, m=model: c(q, m)  # type: ignore[misc]
    for question in MOVIES.questions:
        yield "check_differential", question, lambda q=question: check_differential(MOVIES, q)  # type: ignore[misc]


def sweep(*, first_only: bool = False) -> list[Catch]:
    """Run every check in :data:`CHECKS` on every query of :data:`CORPUS` under every model of
    :data:`MODELS`, then the differential check on every question of the fake world
    (:data:`nlqo.testing.world.MOVIES`); return what failed (with ``first_only``, stop at the first
    failure). A check that crashes counts as a catch too: a bug that makes the engine raise is found."""
    caught: list[Catch] = []
    for check_name, case, run in _cases():
        try:
            run()
        except Exception as exc:  # an InvariantError, or the engine failing under a bug
            caught.append(Catch(check_name, case, f"{type(exc).__name__}: {exc}"))
            if first_only:
                return caught
    return caught


def catalogue_table() -> str:
    """The catalogue as the Markdown table docs/testing.md shows."""
    rows = ["| seeded bug | what changes | where | caught by |", "|---|---|---|---|"]
    for bug in BUGS:
        rows.append(f"| {bug.name} | {bug.what} | `{bug.function}` | `{bug.caught_by}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    from pathlib import Path

    from nlqo.common.docblocks import write_block

    write_block(Path(__file__).resolve().parents[2] / "docs" / "testing.md", "seeded-bugs", catalogue_table())


__all__ = ["BUGS", "CHECKS", "CORPUS", "Catch", "MODELS", "SeededBug", "catalogue_table", "seeded", "sweep"]

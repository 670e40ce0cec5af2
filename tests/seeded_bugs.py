"""A catalogue of seeded optimizer bugs, each caught by the public kit's sweep (:mod:`nlqo.testing.sweep`).

Each :class:`SeededBug` is a small change to the source of one engine function, of the kind a
contributor could make (a pin ignored, a cost sign flipped) or of a mutation that once survived the
whole suite (``Order.of`` 11, 27, 33 and ``search`` 127, 174 of the mutation history). :func:`seeded`
applies one for the length of a ``with`` block: the function is recompiled from the changed source
and put in place of the original wherever nlqo holds it; the optimizer's own ``verify`` step is
switched off meanwhile, so only the kit's checks count. ``tests/test_seeded_bugs.py`` proves that the
sweep catches every one, by the check the catalogue names.

This module lives under tests/, not in the package: it pins the text of internal functions, which
may change with any refactoring. ``python tests/seeded_bugs.py`` writes the catalogue's table into
docs/testing.md.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator
from unittest import mock

import attrs

ISSUE_42 = "issue 42: written for the kit, a change a contributor could make"


@attrs.frozen
class SeededBug:
    """One named bug: in ``function`` (``module:qualname``), ``original`` becomes ``mutant``."""

    name: str
    what: str
    function: str
    original: str
    mutant: str
    caught_by: str
    """The kit's check that catches it (the first in :data:`nlqo.testing.sweep.CHECKS` order)."""
    source: str = ISSUE_42
    """Where the idea came from: written for the kit, a mutant that survived the suite, an issue."""
    oracle_change: str = ""
    """What in the kit had to change before it caught the bug (empty: nothing)."""


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
    SeededBug(
        "leaf count left out of the pruning",
        "the DP prunes sub-plans as if the cost did not read the leaf count",
        "nlqo.optimizer.dp:Order.of",
        'for f in ("imbalance", "edges", "leaves")',
        'for f in ("imbalance", "edges")',
        "check_optimal",
        "mutmut survivor Order.of 11 (and 12: the field's name misspelt), 2026-12-06 re-check",
        "the sweep gained the model few-leaves (cost = depth + leaves), its first that costs the leaf count",
    ),
    SeededBug(
        "shortest child not compared",
        "the DP keeps one of two sub-plans that differ only in their shortest child, whichever came first",
        "nlqo.optimizer.dp:Order.of",
        '[("min_child", -mode("imbalance") if directions["imbalance"] is not None else _EQUAL)]',
        "[]",
        "check_optimal",
        "mutmut survivor Order.of 27, 2026-12-06 re-check (a test with hand-built 9-atom shapes killed it)",
        "the corpus gained the growing branch (11 atoms), and the brute-force oracle enumerates the trees of "
        "the atoms that have a choice instead of refusing queries of more than 8 atoms",
    ),
    SeededBug(
        "shortest child compared the wrong way",
        "when imbalance costs, the DP keeps the sub-plan whose shortest child is shorter",
        "nlqo.optimizer.dp:Order.of",
        '-mode("imbalance") if',
        '+mode("imbalance") if',
        "check_optimal",
        "mutmut survivor Order.of 33, 2026-12-06 re-check",
        "as for 'shortest child not compared'",
    ),
    SeededBug(
        "depth declared by the size",
        "the depth metric declares that it grows with the size, not the height, so the DP prunes on no height",
        "nlqo.optimizer.cost.metrics:depth",
        "@structural(height=1)",
        "@structural(size=1)",
        "check_optimal",
        "issue 53: a lying @structural declaration; mutmut does not mutate decorated functions",
        "the sweep builds its models at each call (it built them once, at import, holding the metrics of then) "
        "and gained few-leaves, a model without imbalance (which makes the DP compare heights for equality "
        "anyway); the new check_declarations, later in the sweep, also catches it",
    ),
    SeededBug(
        "overlapping child ends the search for partners",
        "the DP stops trying children for a sub-plan at the first one that shares an atom with it",
        "nlqo.optimizer.dp:search",
        "if m1 & m2:\n    continue",
        "if m1 & m2:\n    break",
        "check_optimal",
        "mutmut survivor search 127 (commit 7233774)",
        "the corpus gained the growing branch (11 atoms), which the brute-force oracle reaches now",
    ),
    SeededBug(
        "look limit one early",
        "the DP gives up when its looks for a partner reach ten per pair of its budget, not when they pass it",
        "nlqo.optimizer.dp:search",
        "if probes > PROBES_PER_PAIR * budget:",
        "if probes >= PROBES_PER_PAIR * budget:",
        "check_search_monotone",
        "mutmut survivor search 174 (commit 8805dec)",
        "check_search_monotone gives the search a budget of what it used, its pairs or a tenth of its looks "
        "(the plan's stats count looks now), and the corpus gained 'ten looks a pair', where the two meet",
    ),
    SeededBug(
        "equal dimension ignored when replacing",
        "a new sub-plan drops those it beats in the ordered dimensions even where a dimension that must be "
        "equal differs",
        "nlqo.optimizer.dp:_insert",
        "kept = [f for f in frontier if not (f[0] == eq and all(x <= y for x, y in zip(vec, f[1])))]",
        "kept = [f for f in frontier if not all(x <= y for x, y in zip(vec, f[1]))]",
        "check_optimal",
        "modelled on the three dp._insert mutants that survived the first mutation run (commit 8a06178 tests "
        "the frontier by value: a sub-plan of another height is kept)",
        "",
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
    *owners, name = qualname.split(".")
    changed = text.replace(original, mutant)
    if owners:  # a class member is compiled in a class body: its name must not shadow a module global
        changed = "class _Seeded:\n" + textwrap.indent(changed, "    ")
    namespace = dict(vars(module))
    exec(compile(changed, f"<{bug.function} seeded: {bug.name}>", "exec"), namespace)
    new = vars(namespace["_Seeded"])[name] if owners else namespace[name]
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
        try:
            yield
        finally:  # a module first imported in the block took the bug with it: give it the original
            for module in list(sys.modules.values()):
                if module is not None and module.__name__.startswith("nlqo") and getattr(module, name, None) is new:
                    setattr(module, name, old)


def catalogue_table() -> str:
    """The catalogue as the Markdown table docs/testing.md shows."""
    rows = [
        "| seeded bug | what changes | where | caught by | where the idea came from | oracle changed to catch it |",
        "|---|---|---|---|---|---|",
    ]
    for bug in BUGS:
        rows.append(
            f"| {bug.name} | {bug.what} | `{bug.function}` | `{bug.caught_by}` | {bug.source} | "
            f"{bug.oracle_change or 'no'} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nlqo.common.docblocks import write_block

    write_block(Path(__file__).resolve().parents[1] / "docs" / "testing.md", "seeded-bugs", catalogue_table())

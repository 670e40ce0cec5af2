"""Whole-plan invariants, checked after every search."""

from __future__ import annotations

from nlqo.errors import OptimizeError
from nlqo.optimizer.graph import JoinGraph
from nlqo.optimizer.plan import ROOT, Plan


def verify(plan: Plan, graph: JoinGraph | None = None) -> Plan:
    """Raise :class:`OptimizeError` unless the plan is a tree rooted at :data:`ROOT` that holds
    every atom once (or lists it as left out) and uses only allowed edges."""
    tree = plan.tree
    if tree.root != ROOT:
        raise OptimizeError(f"plan root is {tree.root!r}, not the question")
    children = [c for c, _ in tree.parent]
    if len(children) != len(set(children)):
        raise OptimizeError("an atom appears twice in the plan")
    parent = dict(tree.parent)
    for node in parent:
        seen = {node}
        while node != ROOT:
            node = parent.get(node)  # type: ignore[assignment]
            if node is None:
                raise OptimizeError("plan has a node that does not reach the root")
            if node in seen:
                raise OptimizeError("plan has a cycle")
            seen.add(node)
    placed = set(children)
    atoms = set(plan.query.ids)
    left_out = set(plan.left_out_ids)
    if not atoms <= placed | left_out or placed & left_out or not placed <= atoms:
        raise OptimizeError(
            f"plan covers {sorted(placed)} and leaves out {sorted(left_out)}, atoms are {sorted(atoms)}"
        )
    if graph is not None:
        for c, p in tree.parent:
            if not graph.may_attach(p, c):
                raise OptimizeError(f"edge {p} -> {c} is not allowed by the relations")
    return plan

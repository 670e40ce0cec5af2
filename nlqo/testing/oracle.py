"""The brute-force oracle: enumerate every valid tree and take the cheapest. Exponential; meant
for a handful of atoms, to check the optimizer's ``exact`` claim against."""

from __future__ import annotations

import itertools
from typing import Iterator

import attrs

from nlqo.optimizer.cost import CostContext, CostModel
from nlqo.optimizer.graph import JoinGraph, join_graph
from nlqo.common.passages import Embedder
from nlqo.optimizer.plan import ROOT, Plan, Tree


def all_trees(graph: JoinGraph, atoms: int | None = None) -> Iterator[dict[int, int]]:
    """Every tree over all atoms (``{child: parent}``) that uses only allowed edges and is acyclic.

    ``atoms``, a bitmask, restricts the atoms that must be covered (default: all).
    """
    nodes = [v for v in range(1, graph.n) if atoms is None or atoms >> v & 1]
    options = [
        [p for p in range(graph.n) if p != v and graph.allowed[p] >> v & 1 and (p == 0 or p in nodes)] for v in nodes
    ]
    for choice in itertools.product(*options):
        parent = dict(zip(nodes, choice))
        if _reaches_root(parent):
            yield parent


def _reaches_root(parent: dict[int, int]) -> bool:
    for v in parent:
        seen = set()
        while v != 0:
            if v in seen:
                return False
            seen.add(v)
            v = parent[v]
    return True


@attrs.frozen
class Optimum:
    """The best any valid tree can do: atoms covered (most first), then the lowest cost."""

    cover: int
    cost: float
    tree: Tree


def cheapest(plan: Plan, model: CostModel, *, embedder: Embedder | None = None, max_atoms: int = 8) -> Optimum:
    """The optimum over every tree the plan's query and relations allow (the plan's own tree is
    one of them), by the optimizer's rule: cover as many atoms as possible, then lowest cost."""
    q = plan.query
    if len(q.atoms) > max_atoms:
        raise ValueError(f"brute force over {len(q.atoms)} atoms would take too long (max_atoms={max_atoms})")
    graph = join_graph(q, plan.relations)
    ctx = CostContext(q, plan.relations, embedder)
    best: tuple[int, float, Tree] | None = None
    for mask in range(1 << len(q.atoms)):
        cover = bin(mask).count("1")
        if best is not None and cover < best[0]:
            continue
        for parent in all_trees(graph, mask << 1):
            tree = Tree.build(ROOT, {graph.ids[c]: graph.ids[p] for c, p in parent.items()}, graph.ids)
            cost = model.evaluate(tree, ctx).total
            if best is None or cover > best[0] or cost < best[1]:
                best = (cover, cost, tree)
    assert best is not None  # the empty tree is always valid
    return Optimum(*best)

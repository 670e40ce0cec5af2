"""The brute-force oracle: enumerate every valid tree and take the cheapest, to check the optimizer's
``exact`` claim against. Exponential in the atoms that have a choice of parent: a handful of free
atoms, or many more where pins fix the rest."""

from __future__ import annotations

import itertools
import math
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


def cheapest(plan: Plan, model: CostModel, *, embedder: Embedder | None = None, max_trees: int = 2_000_000) -> Optimum:
    """The optimum over every tree the plan's query and relations allow (the plan's own tree is
    one of them), by the optimizer's rule: cover as many atoms as possible, then lowest cost.

    The atoms a tree can cover are those the question reaches through allowed edges (a
    breadth-first tree covers them all, and no tree covers another), so only trees over exactly
    those are enumerated: as many as the product of each atom's allowed parents. That bounds the
    work, not the number of atoms: pins reach far (eleven atoms with one choice are two trees).
    More than ``max_trees`` candidate trees is refused with a ValueError.
    """
    q = plan.query
    graph = join_graph(q, plan.relations)
    reach = _reachable(graph)
    candidates = math.prod(
        max(1, sum(1 for p in range(graph.n) if p != v and graph.allowed[p] >> v & 1 and (p == 0 or reach >> p & 1)))
        for v in range(1, graph.n)
        if reach >> v & 1
    )
    if candidates > max_trees:
        raise ValueError(
            f"brute force over {candidates} candidate trees ({len(q.atoms)} atoms) would take too long "
            f"(max_trees={max_trees})"
        )
    ctx = CostContext(q, plan.relations, embedder)
    best: tuple[float, Tree] | None = None
    for parent in all_trees(graph, reach):
        tree = Tree.build(ROOT, {graph.ids[c]: graph.ids[p] for c, p in parent.items()}, graph.ids)
        cost = model.evaluate(tree, ctx).total
        if best is None or cost < best[0]:
            best = (cost, tree)
    assert best is not None  # a breadth-first tree covers every reachable atom
    return Optimum(bin(reach).count("1"), *best)


def _reachable(graph: JoinGraph) -> int:
    """Bitmask of the atoms the question (node 0) reaches through allowed edges."""
    seen, todo = 0, [0]
    while todo:
        node = todo.pop()
        fresh = graph.allowed[node] & ~seen & ~1
        seen |= fresh
        todo.extend(v for v in range(graph.n) if fresh >> v & 1)
    return seen

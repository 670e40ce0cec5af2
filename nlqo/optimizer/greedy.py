"""Greedy search: the fallback when the DP's pair budget runs out.

Start from the root alone; repeatedly attach the unplaced atom, under the placed node, that gives
the lowest cost of the whole tree so far (the cost model on the structural summary, semantic
metrics counted as 0), until nothing more can attach. Trial summaries are grown with the same
``attach`` the metrics and the DP use, re-folding only the trial's ancestors, and nothing
recurses, so chains of hundreds of atoms plan in well under a second per hundred atoms.
"""

from __future__ import annotations

from typing import Callable

from nlqo.optimizer.cost.shape import LEAF, ROOT, Shape, attach
from nlqo.optimizer.graph import JoinGraph

Score = Callable[[Shape], float]


def greedy(graph: JoinGraph, score: Score) -> dict[int, int]:
    """A tree as ``{child index: parent index}`` over the atoms reachable from the root, grown by
    ``score`` (the cost model's :meth:`~nlqo.optimizer.cost.CostModel.shape_cost`)."""
    parent: dict[int, int] = {}
    children: dict[int, list[int]] = {0: []}
    kids_mask: dict[int, int] = {0: 0}
    shapes: dict[int, Shape] = {0: ROOT}

    def refold(node: int, changed: int, new: Shape) -> Shape:
        """``node``'s summary with child ``changed`` summarised as ``new``."""
        shape = ROOT if node == 0 else LEAF
        mask = 0
        for kid in children[node]:
            links = bin(graph.siblings[kid] & mask).count("1")
            shape = attach(shape, new if kid == changed else shapes[kid], links)
            mask |= 1 << kid
        return shape

    def trial(c: int, p: int) -> tuple[Shape, list[tuple[int, Shape]]]:
        """The root's summary with ``c`` hung under ``p``, and every summary that changes."""
        changed = [(p, attach(shapes[p], LEAF, bin(graph.siblings[c] & kids_mask[p]).count("1")))]
        node = p
        while node != 0:
            up = parent[node]
            changed.append((up, refold(up, node, changed[-1][1])))
            node = up
        return changed[-1][1], changed

    placed = [0]
    unplaced = (1 << graph.n) - 2
    while True:
        best: tuple | None = None
        for p in placed:
            options = graph.allowed[p] & unplaced
            while options:
                c = (options & -options).bit_length() - 1
                options &= options - 1
                root_shape, _ = trial(c, p)
                key = (score(root_shape), c, p)
                if best is None or key < best:
                    best = key
        if best is None:
            return parent
        _, c, p = best
        _, changed = trial(c, p)
        parent[c] = p
        children[p].append(c)
        kids_mask[p] |= 1 << c
        children[c], kids_mask[c], shapes[c] = [], 0, LEAF
        for node, shape in changed:
            shapes[node] = shape
        placed.append(c)
        unplaced &= ~(1 << c)

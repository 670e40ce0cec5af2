"""Greedy search: the fallback when the DP's pair budget runs out.

Start from the root alone; repeatedly attach the unplaced atom, under the placed node, that gives
the lowest structural score (height + imbalance - size - edges), until nothing more can attach.
"""

from __future__ import annotations

from nlqo.optimizer.graph import JoinGraph


def _score(parent: dict[int, int], graph: JoinGraph) -> tuple[int, ...]:
    children: dict[int, list[int]] = {}
    for c, p in parent.items():
        children.setdefault(p, []).append(c)
    heights: dict[int, int] = {}

    def height(v: int) -> int:
        if v not in heights:
            heights[v] = 1 + max((height(c) for c in children.get(v, ())), default=-1)
        return heights[v]

    total_height = height(0)
    imbalance = 0
    edges = len(parent)
    for kids in children.values():
        if len(kids) > 1:
            hs = [height(k) for k in kids]
            imbalance = max(imbalance, max(hs) - min(hs))
        for i, a in enumerate(kids):
            edges += sum(1 for b in kids[i + 1 :] if graph.siblings[a] >> b & 1)
    return (total_height + imbalance - len(parent) - edges,)


def greedy(graph: JoinGraph) -> dict[int, int]:
    """A tree as ``{child index: parent index}`` over the atoms reachable from the root."""
    parent: dict[int, int] = {}
    placed = {0}
    while True:
        best: tuple | None = None
        for p in sorted(placed):
            for c in range(1, graph.n):
                if c in placed or not graph.allowed[p] >> c & 1:
                    continue
                trial = {**parent, c: p}
                key = (_score(trial, graph), c, p)
                if best is None or key < best:
                    best = key
        if best is None:
            return parent
        _, c, p = best
        parent[c] = p
        placed.add(c)

"""Brute-force enumeration of every valid tree: the reference the DP is tested against.

Exponential; meant for a handful of atoms.
"""

from __future__ import annotations

import itertools
from typing import Iterator

from nlqo.optimizer.graph import JoinGraph


def all_trees(graph: JoinGraph, atoms: int | None = None) -> Iterator[dict[int, int]]:
    """Every tree over all atoms (``{child: parent}``) that uses only allowed edges and is acyclic.

    ``atoms``, a bitmask, restricts the atoms that must be covered (default: all).
    """
    nodes = [v for v in range(1, graph.n) if atoms is None or atoms >> v & 1]
    options = [[p for p in range(graph.n) if p != v and graph.allowed[p] >> v & 1 and (p == 0 or p in nodes)] for v in nodes]
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

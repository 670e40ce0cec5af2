"""The join graph the search runs on: which node may be whose child, which atoms are siblings.

Node 0 is the synthetic root; atoms are numbered 1..n in query order.
"""

from __future__ import annotations

from typing import Mapping

import attrs

from nlqo.ir import Query
from nlqo.kinds import RelationKind
from nlqo.optimizer.plan import ROOT
from nlqo.optimizer.relations import depths


@attrs.frozen
class JoinGraph:
    ids: tuple[str, ...]
    """Node ids by index; ``ids[0]`` is :data:`ROOT`."""
    allowed: tuple[int, ...]
    """``allowed[p]``: bitmask of nodes that may hang under node ``p``."""
    siblings: tuple[int, ...]
    """``siblings[a]``: bitmask of atoms related to ``a`` as siblings."""

    @property
    def n(self) -> int:
        return len(self.ids)

    def index(self, node: str) -> int:
        return self.ids.index(node)

    def may_attach(self, parent: str, child: str) -> bool:
        return bool(self.allowed[self.index(parent)] >> self.index(child) & 1)

    def without(self, parent: str, child: str) -> "JoinGraph":
        """The same graph with one edge forbidden."""
        p, c = self.index(parent), self.index(child)
        allowed = list(self.allowed)
        allowed[p] &= ~(1 << c)
        return attrs.evolve(self, allowed=tuple(allowed))


def join_graph(query: Query, relations: Mapping[tuple[str, str], str]) -> JoinGraph:
    """Edges: the root over every depth-0 atom; ``a`` over ``b`` where ``a`` is ``b``'s parent.

    An atom with a pinned parent may hang under that parent only: the pin is kept or the atom is
    left out, never planned elsewhere. An answer atom (``answer q3``) hangs under the root unless
    a pin puts it elsewhere.
    """
    ids = (ROOT, *query.ids)
    index = {node: i for i, node in enumerate(ids)}
    allowed = [0] * len(ids)
    siblings = [0] * len(ids)
    for atom_id, d in depths(query).items():
        if d == 0:
            allowed[0] |= 1 << index[atom_id]
    for (a, b), kind in relations.items():
        ia, ib = index[a], index[b]
        if kind == RelationKind.PARENT:
            allowed[ia] |= 1 << ib
        elif kind == RelationKind.CHILD:
            allowed[ib] |= 1 << ia
        elif kind == RelationKind.SIBLING:
            siblings[ia] |= 1 << ib
            siblings[ib] |= 1 << ia
    pinned_under = {
        r.right: r.left
        for r in query.relations
        if r.kind == RelationKind.PARENT and r.left in index and r.right in index
    }
    for target in query.answer:
        if isinstance(target, str) and target in index and target not in pinned_under:
            pinned_under[target] = ROOT
    for child_id, parent_id in pinned_under.items():
        child = 1 << index[child_id]
        allowed = [mask & ~child if p != index[parent_id] else mask for p, mask in enumerate(allowed)]
    return JoinGraph(ids=ids, allowed=tuple(allowed), siblings=tuple(siblings))


def parents_of(graph: JoinGraph, node: str) -> tuple[str, ...]:
    """The nodes ``node`` may hang under."""
    bit = 1 << graph.index(node)
    return tuple(graph.ids[p] for p, mask in enumerate(graph.allowed) if mask & bit)

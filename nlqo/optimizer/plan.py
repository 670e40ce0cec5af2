"""Logical query trees (LQTs): immutable plan values and read-only views for metrics.

A plan is a tree over the query's atoms under a synthetic root, :data:`ROOT`, that stands for the
question itself: its children are the atoms whose answers answer the question, and each other
atom hangs under the atom its answer feeds. Execution runs bottom-up.
"""

from __future__ import annotations

import functools
from typing import Iterator, Mapping

import attrs

from nlqo.ir import Atom, Query, Var
from nlqo.runtime.llm.base import Usage

ROOT = "$root"
"""Id of the synthetic root node (not a valid atom id, so it never collides)."""


@attrs.frozen
class Tree:
    """A rooted tree: ``parent[child] = parent id``; node order follows ``order``."""

    root: str
    parent: tuple[tuple[str, str], ...]
    """(child, parent) pairs sorted by child position in ``order``."""
    order: tuple[str, ...]
    """Every node id, root first, then atoms in query order (used for deterministic output)."""

    @classmethod
    def build(cls, root: str, parent: Mapping[str, str], order: tuple[str, ...]) -> "Tree":
        rank = {n: i for i, n in enumerate(order)}
        pairs = tuple(sorted(parent.items(), key=lambda cp: rank[cp[0]]))
        nodes = {root, *parent}
        return cls(root=root, parent=pairs, order=tuple(n for n in order if n in nodes))

    @functools.cached_property
    def children(self) -> Mapping[str, tuple[str, ...]]:
        kids: dict[str, list[str]] = {n: [] for n in self.order}
        for c, p in self.parent:
            kids[p].append(c)
        rank = {n: i for i, n in enumerate(self.order)}
        return {n: tuple(sorted(cs, key=rank.__getitem__)) for n, cs in kids.items()}

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.order

    def preorder(self, node: str | None = None, depth: int = 0) -> Iterator[tuple[str, int]]:
        """Nodes with their depth, parents before children (iterative: chains of any length)."""
        stack = [(self.root if node is None else node, depth)]
        while stack:
            current, d = stack.pop()
            yield current, d
            stack.extend((c, d + 1) for c in reversed(self.children[current]))

    def postorder(self, node: str | None = None) -> Iterator[str]:
        """Nodes children first, in the order a recursive post-order walk gives."""
        out = list(self._mirrored_preorder(self.root if node is None else node))
        return reversed(out)

    def _mirrored_preorder(self, node: str) -> Iterator[str]:
        stack = [node]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(self.children[current])

    @functools.cached_property
    def heights(self) -> Mapping[str, int]:
        """Height of each node's subtree in edges (a leaf has height 0)."""
        h: dict[str, int] = {}
        for n in self.postorder():
            h[n] = 1 + max((h[c] for c in self.children[n]), default=-1)
        return h

    def subtree(self, node: str) -> "Tree":
        keep = {n for n, _ in self.preorder(node)}
        return Tree.build(node, {c: p for c, p in self.parent if c in keep and c != node}, self.order)

    def levels(self) -> list[tuple[str, ...]]:
        """Nodes grouped by height: every node's children are in earlier groups (execution waves)."""
        by_height: dict[int, list[str]] = {}
        for n in self.order:
            by_height.setdefault(self.heights[n], []).append(n)
        return [tuple(by_height[h]) for h in sorted(by_height)]


@attrs.frozen
class SearchStats:
    """How the optimizer found the plan."""

    planning_ms: float = 0.0
    llm_calls: int = 0
    cache_hits: int = 0
    subsets: int = 0
    """Distinct atom sets for which the search kept at least one sub-plan."""
    pairs: int = 0
    """Sub-plan pairs considered for a join."""
    looks: int = 0
    """Looks for a join partner, found or not (the DP also stops after ten per pair of its budget)."""
    pruned_pairs: int = 0
    """Atom pairs whose relation is ``none``, never joined."""
    fallback: bool = False
    """True when the DP's pair budget ran out and a greedy search finished the job."""
    method: str = "dp"
    candidates: int = 0
    """Complete trees scored by the full cost model at the end."""
    merge_checks: int = 0
    merge_rejections: int = 0
    budget: int = 0
    """Sub-plan pairs the DP was allowed."""
    beam: int = 0
    """Sub-plans the DP kept per frontier."""
    beam_dropped: int = 0
    """Sub-plans the beam cut (any cut makes the search inexact)."""
    exact: bool = False
    """True when the plan is provably optimal under the cost model: the DP finished within its
    budget, the beam cut nothing, and every metric of the cost is declared structural."""
    inexact_because: tuple[str, ...] = ()
    """Why ``exact`` is false, in words."""
    llm_usage: Usage = Usage()
    """Tokens and time of the ``llm_calls`` (relation classifications and merge checks)."""


@attrs.frozen
class LeftOut:
    """An atom of the input that is not in the plan, and why."""

    id: str
    reason: str
    text: str = ""
    """The atom in plain words (it may no longer be in the plan's query)."""


@attrs.frozen
class Cost:
    total: float
    terms: Mapping[str, float]
    """Every metric value the cost expression used, by name."""


@attrs.frozen
class Plan:
    """An optimised logical query tree for ``query``."""

    query: Query
    tree: Tree
    cost: Cost
    stats: SearchStats = SearchStats()
    left_out: tuple[LeftOut, ...] = ()
    """Atoms of the input that are not in the tree, each with its reason (dropped by a rewrite
    rule, merged into another atom, or in no valid tree)."""
    warnings: tuple[str, ...] = ()
    relations: Mapping[tuple[str, str], str] = attrs.field(factory=dict, eq=False)
    relation_source: Mapping[tuple[str, str], str] = attrs.field(factory=dict, eq=False)

    @property
    def left_out_ids(self) -> tuple[str, ...]:
        return tuple(x.id for x in self.left_out)

    def atom(self, node: str) -> Atom | None:
        return None if node == ROOT else self.query.atom(node)

    def label(self, node: str) -> str:
        """A readable description of a node."""
        if node == ROOT:
            target = ", ".join(str(t) for t in self.query.answer)
            return f"Answer {target}" + (f": {self.query.question}" if self.query.question else "")
        return self.query.atom(node).text()


def textualise(query: Query, tree: Tree, node: str | None = None) -> str:
    """Deterministic text of a (sub)tree for embedding: atoms bottom-up, variables as plain words.

    >>> from nlqo.ir.syntax import parse
    >>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer ?city')
    >>> t = Tree.build(ROOT, {"q2": ROOT, "q1": "q2"}, (ROOT, "q1", "q2"))
    >>> textualise(q, t)
    'd directed Jaws; d born in city'
    """
    parts = []
    for n in tree.postorder(node):
        if n != ROOT:
            atom = query.atom(n)
            parts.append(" ".join(t.name if isinstance(t, Var) else t.text for t in atom.terms))
    return "; ".join(parts)

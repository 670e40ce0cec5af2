"""Selinger-style dynamic programming over sets of atoms.

Every tree decomposes uniquely as its root plus child subtrees attached one at a time in
increasing node order, so the search grows a tree by making the root of a finished sub-plan a
child of the root of another, on disjoint atom sets, only along edges of the join graph (the
disjointness check is the cycle check). A sub-plan is kept per (atom set, root, root's children)
as a Pareto frontier over the structural quantities a later join can change: height, imbalance,
realised relation edges, and the tallest and shortest child of the root. For any cost model that
grows with height and imbalance and shrinks with edges and size (the structural model), this keeps
an optimal tree; the semantic term then chooses among the surviving complete trees.
"""

from __future__ import annotations

from typing import Iterator

import attrs

from nlqo.optimizer.graph import JoinGraph

_INF = 1 << 30


@attrs.frozen
class Entry:
    """One sub-plan: its structural summary and its (child index, parent index) pairs."""

    height: int
    imbalance: int
    edges: int
    max_child: int
    min_child: int
    parent: tuple[tuple[int, int], ...]

    def vector(self) -> tuple[int, int, int, int, int]:
        return (self.height, self.imbalance, -self.edges, self.max_child, -self.min_child)

    def score(self) -> int:
        return self.height + self.imbalance - self.edges


def _dominates(a: tuple, b: tuple) -> bool:
    return all(x <= y for x, y in zip(a, b))


def _insert(frontier: list[Entry], new: Entry, beam: int) -> tuple[list[Entry], int]:
    """Add ``new`` unless dominated; drop what it dominates; keep at most ``beam``. Returns dropped-by-beam."""
    v = new.vector()
    for e in frontier:
        if _dominates(e.vector(), v):
            return frontier, 0
    kept = [e for e in frontier if not _dominates(v, e.vector())]
    kept.append(new)
    if len(kept) <= beam:
        return kept, 0
    kept.sort(key=lambda e: (e.score(), e.vector(), e.parent))
    return kept[:beam], len(kept) - beam


@attrs.frozen
class DPResult:
    complete: dict[int, list[Entry]]
    """Trees rooted at node 0, by atom mask (the root's bit included)."""
    subsets: int
    pairs: int
    beam_dropped: int
    exhausted: bool
    """True when the pair budget ran out before the search finished."""


def _high_bit(mask: int) -> int:
    return mask.bit_length() - 1


def search(graph: JoinGraph, *, budget: int = 50_000, beam: int = 32) -> DPResult:
    """Run the DP; ``budget`` caps sub-plan pairs considered, ``beam`` caps each frontier."""
    n = graph.n
    # states[size][(mask, root, childmask)] -> frontier
    states: list[dict[tuple[int, int, int], list[Entry]]] = [dict() for _ in range(n + 1)]
    # finished sub-plans usable as a child: subs[size][root] -> list of (mask, frontier over h, imb, -edges)
    subs: list[dict[int, list[tuple[int, list[Entry]]]]] = [dict() for _ in range(n + 1)]
    for v in range(n):
        leaf = Entry(0, 0, 0, -1, _INF, ())
        states[1][(1 << v, v, 0)] = [leaf]
    pairs = dropped = 0
    exhausted = False
    for size in range(1, n + 1):
        if size > 1:
            for a in range(1, size):
                b = size - a
                for (m1, r, cm), frontier_a in list(states[a].items()):
                    start = _high_bit(cm) + 1 if cm else 1
                    options = graph.allowed[r] >> start << start
                    while options:
                        c = _high_bit(options & -options)
                        options &= options - 1
                        if m1 >> c & 1:
                            continue
                        for m2, frontier_b in subs[b].get(c, ()):
                            if m1 & m2:
                                continue
                            pairs += 1
                            if pairs > budget:
                                exhausted = True
                                break
                            key = (m1 | m2, r, cm | 1 << c)
                            bucket = states[size].setdefault(key, [])
                            sib = bin(graph.siblings[c] & cm).count("1")
                            for ea in frontier_a:
                                for eb in frontier_b:
                                    max_child = max(ea.max_child, eb.height)
                                    min_child = min(ea.min_child, eb.height)
                                    entry = Entry(
                                        height=max(ea.height, eb.height + 1),
                                        imbalance=max(ea.imbalance, eb.imbalance, max_child - min_child if cm else 0),
                                        edges=ea.edges + eb.edges + 1 + sib,
                                        max_child=max_child,
                                        min_child=min_child,
                                        parent=ea.parent + eb.parent + ((c, r),),
                                    )
                                    bucket, lost = _insert(bucket, entry, beam)
                                    dropped += lost
                            states[size][key] = bucket
                        if exhausted:
                            break
                    if exhausted:
                        break
                if exhausted:
                    break
        if exhausted:
            break
        # finished sub-plans of this size become joinable children
        by_root: dict[tuple[int, int], list[Entry]] = {}
        for (m, r, _), frontier in states[size].items():
            if r == 0:
                continue
            bucket = by_root.setdefault((m, r), [])
            for e in frontier:
                summary = attrs.evolve(e, max_child=0, min_child=0)
                bucket, lost = _insert(bucket, summary, beam)
            by_root[(m, r)] = bucket
        for (m, r), frontier in by_root.items():
            subs[size].setdefault(r, []).append((m, frontier))
    complete: dict[int, list[Entry]] = {}
    for level in states:
        for (m, r, _), frontier in level.items():
            if r == 0:
                complete.setdefault(m, []).extend(frontier)
    subsets = len({m for level in states for (m, _, _) in level})
    return DPResult(complete=complete, subsets=subsets, pairs=min(pairs, budget), beam_dropped=dropped, exhausted=exhausted)


def iter_best(result: DPResult) -> Iterator[tuple[int, Entry]]:
    """Complete trees over the largest coverable atom sets."""
    if not result.complete:
        return
    most = max(bin(m).count("1") for m in result.complete)
    for m in sorted(result.complete):
        if bin(m).count("1") == most:
            for e in result.complete[m]:
                yield m, e

"""Selinger-style dynamic programming over sets of atoms.

Every tree decomposes uniquely as its root plus child subtrees attached one at a time in
increasing node order, so the search grows a tree by making the root of a finished sub-plan a
child of the root of another, on disjoint atom sets, only along edges of the join graph (the
disjointness check is the cycle check). A sub-plan is kept per (atom set, root, root's children)
with its structural summary (:class:`nlqo.optimizer.cost.shape.Shape`, grown by the same ``attach`` the
metrics use). Sub-plans are pruned by dominance in the directions the cost model declares
(:class:`Order`): a quantity the cost only grows with is minimised, one it only shrinks with is
maximised, and one it moves with both ways (or through the spread of child heights) must match
exactly before one sub-plan may replace another. For a cost model made only of declared
structural metrics the surviving complete trees therefore include an optimal one; a beam that
cuts a frontier or a budget that runs out makes the search inexact, and the result says so.
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

import attrs

from nlqo.config import default
from nlqo.optimizer.cost.shape import LEAF, ROOT, Shape, attach, finished
from nlqo.optimizer.graph import JoinGraph

_EQUAL = 0
Score = Callable[[Shape], float]
PROBES_PER_PAIR = 10
"""The search also stops after ``PROBES_PER_PAIR * budget`` looks for a join partner, found or not."""


@attrs.frozen
class Order:
    """How sub-plans compare: ``(field, mode)`` per quantity, mode +1 keep low, -1 keep high, 0 must be equal.

    >>> Order.of({"height": 1, "imbalance": 1, "edges": -1}).finished
    (('height', 0), ('imbalance', 1), ('edges', -1))
    >>> Order.of({"height": -1}).partial
    (('max_child', -1),)
    """

    finished: tuple[tuple[str, int], ...]
    """Dimensions of a sub-plan that is complete below its root (a candidate child)."""
    partial: tuple[tuple[str, int], ...]
    """Dimensions of a sub-plan whose root may still get children."""

    @classmethod
    def of(cls, directions: Mapping[str, int | None]) -> "Order":
        def mode(field: str) -> int:
            d = directions[field]
            return _EQUAL if d is None else d

        plain = [(f, mode(f)) for f in ("imbalance", "edges", "leaves") if f in directions]
        if "imbalance" in directions:  # a child's height moves the spread under its parent both ways
            tall: int | None = _EQUAL
        elif "height" in directions:
            tall = mode("height")
        else:
            tall = None
        short = (
            [("min_child", -mode("imbalance") if directions["imbalance"] is not None else _EQUAL)]
            if "imbalance" in directions
            else []
        )
        return cls(
            finished=tuple(([("height", tall)] if tall is not None else []) + plain),
            partial=tuple(([("max_child", tall)] if tall is not None else []) + short + plain),
        )


@attrs.frozen
class Entry:
    """One sub-plan: its structural summary and its (child index, parent index) pairs."""

    shape: Shape
    parent: tuple[tuple[int, int], ...]


def _split(shape: Shape, dims: tuple[tuple[str, int], ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    equal = tuple(getattr(shape, f) for f, m in dims if m == _EQUAL)
    ordered = tuple(m * getattr(shape, f) for f, m in dims if m != _EQUAL)
    return equal, ordered


Frontier = list[tuple[tuple[int, ...], tuple[int, ...], Entry]]


def _insert(
    frontier: Frontier, new: Entry, dims: tuple[tuple[str, int], ...], beam: int, score: Score
) -> tuple[Frontier, int]:
    """Add ``new`` unless dominated; drop what it dominates; keep at most ``beam``. Returns dropped-by-beam."""
    eq, vec = _split(new.shape, dims)
    for e_eq, e_vec, _ in frontier:
        if e_eq == eq and all(x <= y for x, y in zip(e_vec, vec)):
            return frontier, 0
    kept = [f for f in frontier if not (f[0] == eq and all(x <= y for x, y in zip(vec, f[1])))]
    kept.append((eq, vec, new))
    if len(kept) <= beam:
        return kept, 0
    kept.sort(key=lambda f: (score(f[2].shape), f[1], f[0], f[2].parent))
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
    looks: int = 0
    """Looks for a join partner (the search stops after ``PROBES_PER_PAIR * budget`` of them)."""


def search(
    graph: JoinGraph,
    *,
    budget: int = default("budget"),
    beam: int = default("beam"),
    directions: Mapping[str, int | None] | None = None,
    score: Score | None = None,
) -> DPResult:
    """Run the DP; ``budget`` caps sub-plan pairs considered (and, ten times over, the looks for them), ``beam`` caps each frontier.

    ``directions`` come from :meth:`nlqo.optimizer.cost.CostModel.directions` (default: the structural
    model's); ``score`` orders a frontier when the beam cuts it (default: height + imbalance - edges).
    """
    order = Order.of(directions if directions is not None else {"edges": -1, "height": 1, "imbalance": 1, "size": -1})
    score = score or (lambda s: s.height + s.imbalance - s.edges)
    n = graph.n
    # states[size][(mask, root, childmask)] -> frontier of partial sub-plans
    states: list[dict[tuple[int, int, int], Frontier]] = [dict() for _ in range(n + 1)]
    # finished sub-plans usable as a child: subs[size][root] -> list of (mask, frontier)
    subs: list[dict[int, list[tuple[int, Frontier]]]] = [dict() for _ in range(n + 1)]
    for v in range(n):
        start = Entry(ROOT if v == 0 else LEAF, ())
        states[1][(1 << v, v, 0)] = [(*_split(start.shape, order.partial), start)]
    parents = [[p for p in range(n) if graph.allowed[p] >> c & 1] for c in range(n)]
    # by_root[size][root] -> (mask, childmask) of the partial sub-plans of that size
    by_root: list[dict[int, list[tuple[int, int]]]] = [dict() for _ in range(n + 1)]
    for m, r, cm in states[1]:
        by_root[1].setdefault(r, []).append((m, cm))
    pairs = dropped = probes = 0
    exhausted = False
    for size in range(2, n + 1):
        # finished sub-plans one size smaller become joinable children
        dropped += _finish(states[size - 1], subs[size - 1], order, beam, score)
        for a in range(1, size):
            for c, children in sorted(subs[size - a].items()):
                for r in parents[c]:
                    probes += 1
                    for m1, cm in by_root[a].get(r, ()):
                        probes += 1
                        if m1 >> c & 1 or cm.bit_length() > c:  # children attach in increasing order
                            continue
                        frontier_a = states[a][(m1, r, cm)]
                        links = bin(graph.siblings[c] & cm).count("1")
                        for m2, frontier_b in children:
                            if m1 & m2:
                                continue
                            pairs += 1
                            if pairs > budget:
                                exhausted = True
                                break
                            key = (m1 | m2, r, cm | 1 << c)
                            bucket = states[size].setdefault(key, [])
                            for _, _, ea in frontier_a:
                                for _, _, eb in frontier_b:
                                    entry = Entry(attach(ea.shape, eb.shape, links), ea.parent + eb.parent + ((c, r),))
                                    bucket, lost = _insert(bucket, entry, order.partial, beam, score)
                                    dropped += lost
                            states[size][key] = bucket
                        if exhausted:
                            break
                    if exhausted:
                        break
                if probes > PROBES_PER_PAIR * budget:  # looking for pairs costs too, even where none is found
                    exhausted = True
                if exhausted:
                    break
            if exhausted:
                break
        for m, r, cm in states[size]:
            by_root[size].setdefault(r, []).append((m, cm))
        if exhausted:
            break
    complete: dict[int, list[Entry]] = {}
    for level in states:
        for (m, r, _), frontier in level.items():
            if r == 0:
                complete.setdefault(m, []).extend(e for _, _, e in frontier)
    subsets = len({m for level in states for (m, _, _) in level})
    return DPResult(
        complete=complete,
        subsets=subsets,
        pairs=min(pairs, budget),
        beam_dropped=dropped,
        exhausted=exhausted,
        looks=probes,
    )


def _finish(
    level: dict[tuple[int, int, int], Frontier],
    out: dict[int, list[tuple[int, Frontier]]],
    order: Order,
    beam: int,
    score: Score,
) -> int:
    """File the finished sub-plans of one size under their roots; returns how many the beam cut."""
    dropped = 0
    by_root: dict[tuple[int, int], Frontier] = {}
    for (m, r, _), frontier in level.items():
        if r == 0:
            continue
        bucket = by_root.setdefault((m, r), [])
        for _, _, e in frontier:
            bucket, lost = _insert(bucket, Entry(finished(e.shape), e.parent), order.finished, beam, score)
            dropped += lost
        by_root[(m, r)] = bucket
    for (m, r), frontier in by_root.items():
        out.setdefault(r, []).append((m, frontier))
    return dropped


def iter_best(result: DPResult) -> Iterator[tuple[int, Entry]]:
    """Complete trees over the largest coverable atom sets."""
    if not result.complete:
        return
    most = max(bin(m).count("1") for m in result.complete)
    for m in sorted(result.complete):
        if bin(m).count("1") == most:
            for e in result.complete[m]:
                yield m, e

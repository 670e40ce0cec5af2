"""The structural summary of a plan tree: the one place the structural quantities are defined.

The built-in structural metrics read it, the DP grows it one join at a time and compares
sub-plans by it, and the greedy fallback scores its trial trees with it, so a metric and the
search's pruning cannot drift apart. :func:`attach` is the only rule; :func:`shape_of` folds it
over a finished tree.

>>> leaf = LEAF
>>> two = attach(attach(LEAF, leaf, 0), leaf, 1)  # an atom with two sibling-related children
>>> two.size, two.height, two.edges, two.leaves, two.imbalance
(3, 1, 3, 2, 0)
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import attrs

NO_CHILD = -1
_NO_MIN = 1 << 30

FIELDS = ("size", "height", "imbalance", "edges", "leaves")
"""The quantities a structural metric may depend on (``max_child``/``min_child`` are bookkeeping)."""


@attrs.frozen
class Shape:
    """Structural summary of a (sub)tree rooted at one node."""

    size: int = 1
    """Atom nodes (the synthetic root does not count)."""
    height: int = 0
    """Edges on the longest path from the root down."""
    imbalance: int = 0
    """Largest difference of child subtree heights under any one node."""
    edges: int = 0
    """Tree edges plus pairs of children of one node related as siblings."""
    leaves: int = 1
    """Atom nodes without children."""
    max_child: int = NO_CHILD
    """Height of the root's tallest child subtree (``-1``: no child yet)."""
    min_child: int = _NO_MIN
    """Height of the root's shortest child subtree."""


LEAF = Shape()
"""An atom with no children."""
ROOT = Shape(size=0, leaves=0)
"""The synthetic root (the question) before any child hangs under it."""


def attach(parent: Shape, child: Shape, links: int) -> Shape:
    """``parent`` with ``child``'s root hung under its root; ``links`` is how many of the children
    already there are related to the new one as siblings."""
    tallest, shortest = max(parent.max_child, child.height), min(parent.min_child, child.height)
    spread = tallest - shortest if parent.max_child != NO_CHILD else 0
    was_leaf = parent.max_child == NO_CHILD and parent.size > 0
    return Shape(
        size=parent.size + child.size,
        height=max(parent.height, child.height + 1),
        imbalance=max(parent.imbalance, child.imbalance, spread),
        edges=parent.edges + child.edges + 1 + links,
        leaves=parent.leaves + child.leaves - was_leaf,
        max_child=tallest,
        min_child=shortest,
    )


def finished(shape: Shape) -> Shape:
    """``shape`` as a child: the heights of its own children no longer matter."""
    return attrs.evolve(shape, max_child=0, min_child=0)


def shape_of(
    root: str,
    children: Mapping[str, Sequence[str]],
    siblings: Callable[[str, str], bool],
    *,
    synthetic_root: str | None = None,
) -> Shape:
    """Fold :func:`attach` over a tree bottom-up (iteratively: chains of any length).

    ``siblings(a, b)`` says whether two children of one node are related as siblings; the node
    named ``synthetic_root`` starts from :data:`ROOT` instead of :data:`LEAF`.
    """
    order: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(children.get(node, ()))
    done: dict[str, Shape] = {}
    for node in reversed(order):
        shape = ROOT if node == synthetic_root else LEAF
        kids = children.get(node, ())
        for i, kid in enumerate(kids):
            links = sum(1 for other in kids[:i] if siblings(other, kid))
            shape = attach(shape, done.pop(kid), links)
        done[node] = shape
    return done[root]

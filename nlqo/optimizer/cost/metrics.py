"""Metrics of a plan tree, the names a cost expression can use.

A metric is a function ``(tree, ctx) -> float``. Built-ins are below; third-party packages add
their own under the entry-point group ``nlqo.metrics``, and callers can pass more by name.

A metric that depends only on the tree's structural summary (:class:`nlqo.optimizer.cost.shape.Shape`) is
declared with :func:`structural`, naming the direction in which it moves with each field it
reads. The search uses those declarations to prune sub-plans soundly; a metric without one (such
as ``similarity``) is only evaluated on the complete candidate trees, and the plan then says the
search was not exact.

>>> depth.structure.directions
{'height': 1}
"""

from __future__ import annotations

import functools
import threading
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

import attrs
import numpy as np

from nlqo.optimizer.cost.shape import FIELDS, Shape, shape_of
from nlqo.errors import CostModelError
from nlqo.ir import Query
from nlqo.kinds import RelationKind
from nlqo.common.passages import Embedder
from nlqo.optimizer.plan import ROOT, Tree, textualise

Metric = Callable[[Tree, "CostContext"], float]


@attrs.frozen
class Structure:
    """How a structural metric depends on the summary: its value, and its direction per field."""

    of_shape: Callable[[Shape], float]
    directions: Mapping[str, int]
    """Field -> +1 (never decreases as the field grows) or -1 (never increases); unnamed fields do not change it."""


def structural(**directions: int) -> Callable[[Callable[[Shape], float]], Metric]:
    """Declare a metric as a function of the structural summary, monotone as ``directions`` say.

    >>> @structural(leaves=1, size=-1)
    ... def leafiness(shape):
    ...     "Share of atoms that are leaves."
    ...     return shape.leaves / max(shape.size, 1)
    >>> leafiness.structure.directions
    {'leaves': 1, 'size': -1}

    ``nlqo.testing.check_monotone`` checks a declaration against random trees.
    """
    unknown = set(directions) - set(FIELDS)
    bad = {k: v for k, v in directions.items() if v not in (1, -1)}
    if unknown or bad:
        raise CostModelError(f"structural(): fields are {', '.join(FIELDS)} and directions +1 or -1, got {directions}")

    def declare(of_shape: Callable[[Shape], float]) -> Metric:
        @functools.wraps(of_shape)
        def metric(tree: Tree, ctx: "CostContext") -> float:
            return float(of_shape(ctx.shape(tree)))

        metric.structure = Structure(of_shape, dict(directions))  # type: ignore[attr-defined]
        return metric

    return declare


def structure_of(metric: Metric) -> Structure | None:
    """The metric's :class:`Structure` declaration, or ``None`` for a metric that reads more than the summary."""
    found: Any = getattr(metric, "structure", None)
    return found if isinstance(found, Structure) else None


@attrs.define(eq=False)
class CostContext:
    """What metrics may look at besides the tree: the query, pair relations, an embedder."""

    query: Query
    relations: Mapping[tuple[str, str], str] = attrs.field(factory=dict)
    embedder: Embedder | None = None
    _vectors: dict[str, np.ndarray] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    _shapes: dict[Tree, Shape] = attrs.field(factory=dict)

    def relation(self, a: str, b: str) -> RelationKind:
        """Oriented relation of two atoms ('none' when unknown)."""
        if (a, b) in self.relations:
            return RelationKind(self.relations[(a, b)])
        return RelationKind(self.relations.get((b, a), RelationKind.NONE)).flip()

    def shape(self, tree: Tree) -> Shape:
        """The tree's structural summary (cached per tree)."""
        with self._lock:
            if tree in self._shapes:
                return self._shapes[tree]
        found = shape_of(
            tree.root,
            tree.children,
            lambda a, b: self.relation(a, b) == RelationKind.SIBLING,
            synthetic_root=ROOT,
        )
        with self._lock:
            self._shapes[tree] = found
        return found

    def embed(self, text: str) -> np.ndarray:
        """Embedding of ``text``, cached; needs an embedder."""
        if self.embedder is None:
            raise CostModelError(
                "this cost model uses 'similarity', which needs an embedder; "
                "pass one, or use the 'structural' cost model"
            )
        with self._lock:
            if text in self._vectors:
                return self._vectors[text]
        vector = self.embedder.encode([text], kind="query")[0]
        with self._lock:
            self._vectors[text] = vector
        return vector

    @property
    def question_text(self) -> str:
        return self.query.question or "; ".join(a.text() for a in self.query.atoms)


@structural(size=1)
def size(shape: Shape) -> float:
    """Number of atom nodes (the synthetic root does not count)."""
    return shape.size


@structural(edges=1)
def edges(shape: Shape) -> float:
    """Structural density: tree edges plus pairs of children of one node related as siblings."""
    return shape.edges


@structural(height=1)
def depth(shape: Shape) -> float:
    """Height of the tree in edges."""
    return shape.height


@structural(imbalance=1)
def imbalance(shape: Shape) -> float:
    """Largest difference of subtree heights among the children of any one node."""
    return shape.imbalance


def similarity(tree: Tree, ctx: CostContext) -> float:
    """Cosine similarity of the textualised tree to the question (vectors are normalised)."""
    text = textualise(ctx.query, tree)
    if not text:
        return 0.0
    return float(np.dot(ctx.embed(text), ctx.embed(ctx.question_text)))


@structural(leaves=1)
def leaves(shape: Shape) -> float:
    """Number of atom nodes without children (they run in the first parallel wave)."""
    return shape.leaves


def builtin_metrics() -> dict[str, Metric]:
    return {
        "size": size,
        "edges": edges,
        "depth": depth,
        "imbalance": imbalance,
        "similarity": similarity,
        "leaves": leaves,
    }


def registry(extra: Mapping[str, Metric] | None = None) -> dict[str, Metric]:
    """Built-in metrics, then those of installed packages (entry points ``nlqo.metrics``), then ``extra``."""
    found = builtin_metrics()
    for ep in entry_points(group="nlqo.metrics"):
        found[ep.name] = ep.load()
    found.update(extra or {})
    return found

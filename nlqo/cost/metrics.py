"""Metrics of a plan tree, the names a cost expression can use.

A metric is a function ``(tree, ctx) -> float``. Built-ins are below; third-party packages add
their own under the entry-point group ``nlqo.metrics``, and callers can pass more by name.
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from typing import Callable, Mapping

import attrs
import numpy as np

from nlqo.errors import CostModelError
from nlqo.ir import Query
from nlqo.passages import Embedder
from nlqo.plan import ROOT, Tree, textualise

Metric = Callable[[Tree, "CostContext"], float]


@attrs.define(eq=False)
class CostContext:
    """What metrics may look at besides the tree: the query, pair relations, an embedder."""

    query: Query
    relations: Mapping[tuple[str, str], str] = attrs.field(factory=dict)
    embedder: Embedder | None = None
    _vectors: dict[str, np.ndarray] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def relation(self, a: str, b: str) -> str:
        """Oriented relation of two atoms ('none' when unknown)."""
        if (a, b) in self.relations:
            return self.relations[(a, b)]
        kind = self.relations.get((b, a), "none")
        return {"parent": "child", "child": "parent"}.get(kind, kind)

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


def size(tree: Tree, ctx: CostContext) -> float:
    """Number of atom nodes (the synthetic root does not count)."""
    return float(sum(1 for n in tree.nodes if n != ROOT))


def edges(tree: Tree, ctx: CostContext) -> float:
    """Structural density: tree edges plus pairs of children of one node related as siblings."""
    count = len(tree.parent)
    for kids in tree.children.values():
        atoms = [k for k in kids if k != ROOT]
        count += sum(
            1 for i, a in enumerate(atoms) for b in atoms[i + 1 :] if ctx.relation(a, b) == "sibling"
        )
    return float(count)


def depth(tree: Tree, ctx: CostContext) -> float:
    """Height of the tree in edges."""
    return float(tree.heights[tree.root])


def imbalance(tree: Tree, ctx: CostContext) -> float:
    """Largest difference of subtree heights among the children of any one node."""
    worst = 0
    for kids in tree.children.values():
        if len(kids) > 1:
            hs = [tree.heights[k] for k in kids]
            worst = max(worst, max(hs) - min(hs))
    return float(worst)


def similarity(tree: Tree, ctx: CostContext) -> float:
    """Cosine similarity of the textualised tree to the question (vectors are normalised)."""
    text = textualise(ctx.query, tree)
    if not text:
        return 0.0
    return float(np.dot(ctx.embed(text), ctx.embed(ctx.question_text)))


def leaves(tree: Tree, ctx: CostContext) -> float:
    """Number of atom nodes without children (they run in the first parallel wave)."""
    return float(sum(1 for n, kids in tree.children.items() if n != ROOT and not kids))


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

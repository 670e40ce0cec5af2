"""The retriever-side terminator of the linear template (TSSS "stop smart")."""

from __future__ import annotations

from typing import Sequence

import attrs
import numpy as np

from nlqo.passages import Embedder


def max_similarity(candidate: np.ndarray, earlier: np.ndarray) -> float:
    """Largest cosine similarity of a normalised vector to rows of normalised vectors.

    >>> a = np.array([1.0, 0.0]); rows = np.array([[0.0, 1.0], [0.6, 0.8]])
    >>> round(max_similarity(a, rows), 2)
    0.6
    """
    if len(earlier) == 0:
        return 0.0
    return float(np.max(earlier @ candidate))


@attrs.define(eq=False)
class Terminator:
    """Stops when a new sub-question is as close as ``tau`` to the main question or an earlier one."""

    embedder: Embedder
    tau: float = 0.85
    _vectors: list[np.ndarray] = attrs.field(factory=list)

    def start(self, question: str) -> None:
        self._vectors = [self.embedder.encode([question], kind="query")[0]]

    def score(self, sub_question: str) -> float:
        """Score ``sub_question`` against what came before, then remember it."""
        v = self.embedder.encode([sub_question], kind="query")[0]
        s = max_similarity(v, np.stack(self._vectors))
        self._vectors.append(v)
        return s

    def should_stop(self, score: float) -> bool:
        return score >= self.tau


def dedupe(sub_questions: Sequence[str]) -> list[str]:
    seen: dict[str, None] = {}
    for s in sub_questions:
        seen.setdefault(s.strip().lower(), None)
    return list(seen)

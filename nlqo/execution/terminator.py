"""The retriever-side terminator of the linear template (TSSS "stop smart")."""

from __future__ import annotations

from typing import Sequence

import attrs
import numpy as np

from nlqo.config import default
from nlqo.common.passages import Embedder


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
    tau: float = default("tau")
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


def hops_at(scores: Sequence[float], tau: float, ran_hops: int, min_hops: int = 1) -> int:
    """Hops the linear template makes at ``tau``, read off a run at a higher tau.

    ``scores`` are that run's terminator scores in order (hop 1 first, the sub-question it stopped
    on last), ``ran_hops`` its hop count. Decoding is greedy and the transcript before a stop does
    not depend on tau, so a lower tau stops at the first hop after ``min_hops`` whose score
    reaches it; a higher tau than the run's cannot be read off.

    >>> hops_at([0.5, 0.82, 0.88, 0.95], 0.8, 3)
    1
    >>> hops_at([0.5, 0.82, 0.88, 0.95], 0.85, 3)
    2
    >>> hops_at([0.9, 0.5, 0.7], 0.85, 3)
    3
    """
    for hop, score in enumerate(scores, 1):
        if hop > min_hops and score >= tau:
            return hop - 1
    return ran_hops

"""Reciprocal rank fusion of several rankings."""

from __future__ import annotations

from typing import Sequence

HYBRID_DEPTH = 100
"""Hits of each retriever that hybrid search fuses."""
RRF_K = 60
"""Reciprocal rank fusion's constant (the usual 60)."""


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse rankings of ids (best first) by ``sum(1 / (k + rank))``; ties keep first-seen order.

    >>> reciprocal_rank_fusion([[7, 3, 5], [3, 9]], k=60)[:2]
    [(3, 0.03252247488101534), (7, 0.01639344262295082)]
    """
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])

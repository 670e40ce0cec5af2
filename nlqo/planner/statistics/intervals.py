"""Intervals of estimated quality: every estimate carries one, with its sample count.

>>> low, high = wilson(20, 50)
>>> round(low, 3), round(high, 3)
(0.276, 0.538)
>>> wilson(0, 0)
(0.0, 1.0)
"""

from __future__ import annotations

import math

Z95 = 1.96


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (exact match is 0 or 1 per question); (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes <= 0 else max(0.0, centre - half)
    high = 1.0 if successes >= n else min(1.0, centre + half)
    return low, high

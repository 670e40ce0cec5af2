"""Physical plans and what they are estimated by: the backend's per-token costs and each operator's estimate."""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from nlqo.config import default
from nlqo.optimizer.plan import Plan

PASSAGE_TOKENS = 110
"""Prompt tokens one retrieved passage adds (80 words, title, numbering)."""


@attrs.frozen
class BackendProfile:
    """Per-token costs of a backend, measured or assumed, and how many requests it serves at once."""

    prefill_ms_per_token: float = 4.0
    decode_ms_per_token: float = 120.0
    concurrency: int = 1
    kv_reuse: bool = default("kv_reuse")
    retrieve_ms: float = 15.0
    source: str = "assumed"
    batch_speedup: tuple[float, ...] = ()
    """Measured throughput of n requests run at once relative to one request, for n = 1, 2, ...
    (empty: not measured, and ``concurrency`` requests are assumed to run fully in parallel, as on a
    server with that many slots)."""
    concurrency_source: str = "assumed"
    """Where ``concurrency`` comes from: 'assumed' (the backend's declared capabilities), 'server slots'
    (what the server reports) or 'measured' (requests sent at once to a server that reports none)."""

    def wave_ms(self, nodes: int, node_ms: float) -> float:
        """Wall time of ``nodes`` independent requests of ``node_ms`` each.

        >>> BackendProfile(concurrency=4).wave_ms(4, 100.0)
        100.0
        >>> BackendProfile(concurrency=4, batch_speedup=(1.0, 1.25)).wave_ms(2, 100.0)
        160.0
        """
        at_once = max(1, min(nodes, self.concurrency))
        rounds = math.ceil(nodes / at_once)
        if not self.batch_speedup:
            return rounds * node_ms
        speedup = self.batch_speedup[min(at_once, len(self.batch_speedup)) - 1]
        return rounds * node_ms * at_once / max(speedup, 1e-9)


@attrs.frozen
class Estimate:
    ms: float
    llm_calls: int
    generated_tokens: int
    computed_prompt_tokens: int


@attrs.frozen
class PhysicalPlan:
    operator: str
    """The operator's name in :data:`nlqo.execution.operators.OPERATORS` (a built-in's is a :class:`~nlqo.kinds.Operator`)."""
    logical: Plan
    estimates: Mapping[str, Estimate]
    reason: str
    hints: tuple[str, ...] = ()
    """Atom texts in execution order, offered to the linear template."""
    waves: tuple[tuple[str, ...], ...] = ()
    """Nodes by execution wave (tree)."""
    parsed: bool = True
    """False when the question was not parsed (the operator needs no plan, or parsing failed):
    ``logical`` is then the question as one atom."""
    choice: Any = None
    """How ``auto`` chose the operator from statistics (:class:`nlqo.planner.statistics.policy.Choice`), or None."""

"""Counters and latencies of a running service, as JSON (``/v1/stats``) and Prometheus text (``/metrics``)."""

from __future__ import annotations

import bisect
import collections
import enum
import itertools
import threading
import time

import attrs

WINDOW = 1000
"""Latencies kept for the percentiles: the last this many requests."""
RATE_SECONDS = 60.0
"""Tokens per second are counted over the last this many seconds."""
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Upper bounds (seconds) of the latency histogram's buckets; ``+Inf`` follows."""


class Outcome(enum.StrEnum):
    """How a request ended, as the stats count it."""

    OK = "ok"
    BUSY = "busy"
    """refused with 429: every slot busy and the queue full"""
    CLOSING = "closing"
    """refused or dropped with 503: the service was shutting down"""
    TIMEOUT = "timeout"
    """answered 504: past its deadline"""
    CANCELLED = "cancelled"
    """the client went away before the answer"""
    REJECTED = "rejected"
    """an error nlqo explains (a bad question, a failed model or index)"""
    ERROR = "error"
    """a bug: answered 500"""


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (nearest rank) of ``values``, or None when there are none.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 95), percentile([], 50)
    (2.0, 4.0, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


@attrs.define
class Histogram:
    """Counts of observed seconds per bucket of :data:`BUCKETS` (the last one is ``+Inf``), their sum and count.

    >>> h = Histogram()
    >>> h.observe(0.07); h.observe(3.0); h.observe(1000.0)
    >>> h.cumulative()[:3], h.cumulative()[-1], h.count, h.total
    ([0, 1, 1], 3, 3, 1003.07)
    """

    counts: list[int] = attrs.field(factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.count += 1

    def cumulative(self) -> list[int]:
        """Observations at most each bound, the ``+Inf`` bucket last (Prometheus' ``le``)."""
        return list(itertools.accumulate(self.counts))


@attrs.define
class ServiceStats:
    """Thread-safe counters of one service process."""

    started: float = attrs.field(factory=time.monotonic)
    requests: collections.Counter = attrs.field(factory=collections.Counter)
    """Finished requests by endpoint and :class:`Outcome`, e.g. ``("ask", Outcome.OK)``."""
    latencies: collections.deque = attrs.field(factory=lambda: collections.deque(maxlen=WINDOW))
    histograms: dict[str, Histogram] = attrs.field(factory=dict)
    """Latency of the answered requests of each endpoint, since the start."""
    tokens: collections.deque = attrs.field(factory=collections.deque)
    """``(monotonic time, generated tokens)`` of recent answers."""
    generated_tokens: int = 0
    prompt_tokens: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def finished(self, endpoint: str, outcome: Outcome, seconds: float, *, generated: int = 0, prompt: int = 0) -> None:
        now = time.monotonic()
        with self._lock:
            self.requests[(endpoint, Outcome(outcome))] += 1
            if outcome == Outcome.OK:
                self.latencies.append(seconds)
                self.histograms.setdefault(endpoint, Histogram()).observe(seconds)
            self.generated_tokens += generated
            self.prompt_tokens += prompt
            if generated:
                self.tokens.append((now, generated))
            while self.tokens and self.tokens[0][0] < now - RATE_SECONDS:
                self.tokens.popleft()

    def snapshot(self, *, queued: int, running: int, capacity: int, queue_limit: int) -> dict:
        """The numbers ``/v1/stats`` returns."""
        now = time.monotonic()
        with self._lock:
            latencies = list(self.latencies)
            recent = sum(n for t, n in self.tokens if t >= now - RATE_SECONDS)
            requests = dict(self.requests)
            histograms = {e: (h.cumulative(), h.total, h.count) for e, h in sorted(self.histograms.items())}
            generated, prompt = self.generated_tokens, self.prompt_tokens
        uptime = now - self.started
        outcomes = dict.fromkeys(map(str, Outcome), 0)
        for (_, outcome), n in requests.items():
            outcomes[str(outcome)] += n
        return {
            "uptime_seconds": round(uptime, 3),
            "queue_length": queued,
            "running": running,
            "capacity": capacity,
            "queue_limit": queue_limit,
            "requests_served": outcomes[Outcome.OK],
            "outcomes": outcomes,
            "requests": {f"{endpoint} {outcome}": n for (endpoint, outcome), n in sorted(requests.items())},
            "latency_seconds": {
                "p50": percentile(latencies, 50),
                "p95": percentile(latencies, 95),
                "window": len(latencies),
                "histogram": {
                    endpoint: {
                        "buckets": [[le, n] for le, n in zip([*BUCKETS, "+Inf"], counts)],
                        "sum": total,
                        "count": count,
                    }
                    for endpoint, (counts, total, count) in histograms.items()
                },
            },
            "generated_tokens_per_second": round(recent / min(RATE_SECONDS, max(uptime, 1e-9)), 3),
            "generated_tokens": generated,
            "prompt_tokens": prompt,
        }


def prometheus(snapshot: dict) -> str:
    """``snapshot`` in the Prometheus text exposition format (version 0.0.4).

    >>> text = prometheus({"queue_length": 2, "running": 1, "capacity": 4, "queue_limit": 16,
    ...     "requests": {"ask ok": 3, "ask busy": 1}, "latency_seconds": {"histogram": {"ask": {
    ...     "buckets": [[0.5, 1], [1.0, 3], ["+Inf", 3]], "sum": 2.25, "count": 3}}}, "generated_tokens": 10,
    ...     "prompt_tokens": 90, "generated_tokens_per_second": 0.5, "uptime_seconds": 20.0}).splitlines()
    >>> print("\\n".join(line for line in text if "requests_total{" in line or "latency" in line))
    nlqo_requests_total{endpoint="ask",outcome="ok"} 3
    nlqo_requests_total{endpoint="ask",outcome="busy"} 1
    # HELP nlqo_latency_seconds Latency of answered requests, by endpoint.
    # TYPE nlqo_latency_seconds histogram
    nlqo_latency_seconds_bucket{endpoint="ask",le="0.5"} 1
    nlqo_latency_seconds_bucket{endpoint="ask",le="1.0"} 3
    nlqo_latency_seconds_bucket{endpoint="ask",le="+Inf"} 3
    nlqo_latency_seconds_sum{endpoint="ask"} 2.25
    nlqo_latency_seconds_count{endpoint="ask"} 3
    """
    lines = [
        "# HELP nlqo_queue_length Requests waiting for a slot.",
        "# TYPE nlqo_queue_length gauge",
        f"nlqo_queue_length {snapshot['queue_length']}",
        "# HELP nlqo_requests_total Finished requests by endpoint and outcome (ok, busy, timeout, cancelled, ...).",
        "# TYPE nlqo_requests_total counter",
    ]
    lines += [
        f'nlqo_requests_total{{endpoint="{k.split()[0]}",outcome="{k.split()[1]}"}} {n}'
        for k, n in snapshot["requests"].items()
    ]
    lines += [
        "# HELP nlqo_running Requests being answered.",
        "# TYPE nlqo_running gauge",
        f"nlqo_running {snapshot['running']}",
        "# TYPE nlqo_capacity gauge",
        f"nlqo_capacity {snapshot['capacity']}",
        "# TYPE nlqo_queue_limit gauge",
        f"nlqo_queue_limit {snapshot['queue_limit']}",
        "# HELP nlqo_latency_seconds Latency of answered requests, by endpoint.",
        "# TYPE nlqo_latency_seconds histogram",
    ]
    for endpoint, h in snapshot["latency_seconds"]["histogram"].items():
        lines += [f'nlqo_latency_seconds_bucket{{endpoint="{endpoint}",le="{le}"}} {n}' for le, n in h["buckets"]]
        lines.append(f'nlqo_latency_seconds_sum{{endpoint="{endpoint}"}} {h["sum"]}')
        lines.append(f'nlqo_latency_seconds_count{{endpoint="{endpoint}"}} {h["count"]}')
    lines += [
        "# TYPE nlqo_generated_tokens_total counter",
        f"nlqo_generated_tokens_total {snapshot['generated_tokens']}",
        "# TYPE nlqo_prompt_tokens_total counter",
        f"nlqo_prompt_tokens_total {snapshot['prompt_tokens']}",
        "# TYPE nlqo_generated_tokens_per_second gauge",
        f"nlqo_generated_tokens_per_second {snapshot['generated_tokens_per_second']}",
        "# TYPE nlqo_uptime_seconds gauge",
        f"nlqo_uptime_seconds {snapshot['uptime_seconds']}",
    ]
    return "\n".join(lines) + "\n"

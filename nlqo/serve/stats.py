"""Counters and latencies of a running service, as JSON (``/v1/stats``) and Prometheus text (``/metrics``)."""

from __future__ import annotations

import collections
import threading
import time

import attrs

WINDOW = 1000
"""Latencies kept for the percentiles: the last this many requests."""
RATE_SECONDS = 60.0
"""Tokens per second are counted over the last this many seconds."""


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
class ServiceStats:
    """Thread-safe counters of one service process."""

    started: float = attrs.field(factory=time.monotonic)
    requests: collections.Counter = attrs.field(factory=collections.Counter)
    """Finished requests by endpoint and outcome, e.g. ``("ask", "ok")``."""
    latencies: collections.deque = attrs.field(factory=lambda: collections.deque(maxlen=WINDOW))
    tokens: collections.deque = attrs.field(factory=collections.deque)
    """``(monotonic time, generated tokens)`` of recent answers."""
    generated_tokens: int = 0
    prompt_tokens: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def finished(self, endpoint: str, outcome: str, seconds: float, *, generated: int = 0, prompt: int = 0) -> None:
        now = time.monotonic()
        with self._lock:
            self.requests[(endpoint, outcome)] += 1
            if outcome == "ok":
                self.latencies.append(seconds)
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
            generated, prompt = self.generated_tokens, self.prompt_tokens
        uptime = now - self.started
        return {
            "uptime_seconds": round(uptime, 3),
            "queue_length": queued,
            "running": running,
            "capacity": capacity,
            "queue_limit": queue_limit,
            "requests_served": sum(n for (_, outcome), n in requests.items() if outcome == "ok"),
            "requests": {f"{endpoint} {outcome}": n for (endpoint, outcome), n in sorted(requests.items())},
            "latency_seconds": {
                "p50": percentile(latencies, 50),
                "p95": percentile(latencies, 95),
                "window": len(latencies),
            },
            "generated_tokens_per_second": round(recent / min(RATE_SECONDS, max(uptime, 1e-9)), 3),
            "generated_tokens": generated,
            "prompt_tokens": prompt,
        }


def prometheus(snapshot: dict) -> str:
    """``snapshot`` in the Prometheus text exposition format (version 0.0.4).

    >>> print(prometheus({"queue_length": 2, "running": 1, "capacity": 4, "queue_limit": 16, "requests": {"ask ok": 3},
    ...     "latency_seconds": {"p50": 1.5, "p95": None}, "generated_tokens": 10, "prompt_tokens": 90,
    ...     "generated_tokens_per_second": 0.5, "uptime_seconds": 20.0}).splitlines()[4])
    nlqo_requests_total{endpoint="ask",outcome="ok"} 3
    """
    lines = [
        "# HELP nlqo_queue_length Requests waiting for a slot.",
        "# TYPE nlqo_queue_length gauge",
        f"nlqo_queue_length {snapshot['queue_length']}",
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
        "# HELP nlqo_latency_seconds Latency of answered requests over the recent window.",
        "# TYPE nlqo_latency_seconds summary",
    ]
    for q, key in (("0.5", "p50"), ("0.95", "p95")):
        value = snapshot["latency_seconds"][key]
        lines.append(f'nlqo_latency_seconds{{quantile="{q}"}} {"NaN" if value is None else value}')
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

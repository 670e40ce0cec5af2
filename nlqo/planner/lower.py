"""Lowering: choose the physical operator for a logical plan by estimated cost.

Like a database choosing a join method, the estimate combines the plan's shape with per-call costs
of the backend: the linear template runs atoms one after another on one growing text whose prefix
is served from the KV cache; the tree runs each wave of independent nodes concurrently, as far as
the backend serves requests in parallel, but recomputes every prompt.
"""

from __future__ import annotations


import attrs

from nlqo.config import default
from nlqo.execution.operators import OPERATORS
from nlqo.execution.physical import BackendProfile, PhysicalPlan
from nlqo.optimizer.plan import ROOT, Plan
from nlqo.runtime.llm.base import capabilities

_PROBE_TEXT = (
    "The river Thames flows through London, the capital of England. Paris lies on the Seine, "
    "Vienna and Budapest on the Danube, Cairo on the Nile and Rome on the Tiber. "
)


def measure_profile(
    llm, base: BackendProfile = BackendProfile(), *, long_prompt_repeats: int = 4, decode_tokens: int = 6
) -> BackendProfile:
    """``base`` with per-token costs, concurrency and batch gain measured on ``llm``.

    One call prefills a long prompt and generates one token, the other prefills a short one and
    generates ``decode_tokens``; their wall times and token counts give prefill and decode ms
    per token (a 2x2 linear system). If the backend reports no timings or the system is
    degenerate, ``base`` is returned unchanged (its ``source`` still says "assumed").
    A server's concurrency is what it reports, else measured (:func:`server_concurrency`); a
    server that serves a repeated prompt from its prefix cache counts as reusing the KV cache
    (:func:`server_prefix_cache`).
    """

    def probe(prompt: str, max_tokens: int) -> tuple[int, int, float]:
        usage = llm.complete(prompt, max_tokens=max_tokens).usage
        return usage.prompt_tokens - usage.cached_prompt_tokens, max(1, usage.generated_tokens), usage.wall_ms

    long_prompt = _PROBE_TEXT * long_prompt_repeats
    (p1, g1, t1) = probe(long_prompt, 1)
    kv_reuse = base.kv_reuse or server_prefix_cache(
        llm, long_prompt
    )  # right after it, before another prompt takes its slot
    (p2, g2, t2) = probe("Rivers:", decode_tokens)
    det = p1 * g2 - p2 * g1
    if det <= 0 or t1 <= 0 or t2 <= 0:
        return base
    prefill = (t1 * g2 - t2 * g1) / det
    decode = (p1 * t2 - p2 * t1) / det
    if prefill <= 0 or decode <= 0:
        return base
    concurrency, how = server_concurrency(llm, base)
    speedup = measure_batch_speedup(llm, concurrency) if concurrency > 1 else ()
    return attrs.evolve(
        base, prefill_ms_per_token=prefill, decode_ms_per_token=decode, source="measured",
        concurrency=concurrency, concurrency_source=how, batch_speedup=speedup, kv_reuse=kv_reuse,
    )  # fmt: skip


def server_prefix_cache(llm, prompt: str) -> bool:
    """Whether a server backend served a prompt it was just sent from its prefix cache (the llama.cpp
    server keeps each slot's last prompt and reports the cached tokens): then the linear template's
    growing text is not recomputed either, as with a local runtime's KV reuse. False for other backends."""
    if not capabilities(llm).server_slots:
        return False
    usage = llm.complete(prompt, max_tokens=1).usage
    return usage.prompt_tokens > 0 and usage.cached_prompt_tokens >= usage.prompt_tokens // 2


PROBE_REQUESTS = 4
"""Requests sent at once to find the concurrency of a server that does not report it."""


def server_concurrency(llm, base: BackendProfile) -> tuple[int, str]:
    """(concurrency, where it comes from) of ``llm``.

    A server backend (one declaring ``Capabilities.server_slots``) that reports its slots gives
    them; one that reports none is measured (:func:`probe_concurrency`). Other backends keep
    ``base.concurrency`` (an in-process runtime knows its own).
    """
    if not capabilities(llm).server_slots:
        return base.concurrency, base.concurrency_source
    reported = llm.server_slots()
    if reported:
        return reported, "server slots"
    return probe_concurrency(llm), "measured"


def probe_concurrency(llm, *, requests: int = PROBE_REQUESTS, rounds: int = 2, decode_tokens: int = 12) -> int:
    """Requests ``llm`` runs at once, measured: ``requests`` equal requests are sent together and
    counted as running at once when they finish with the first (:func:`concurrent_requests`); the
    smallest count of ``rounds`` rounds, after one request to warm the server up. Comparing the
    requests of one round with each other, not with a request timed earlier, keeps other load on
    the machine out of the count."""
    from concurrent.futures import ThreadPoolExecutor

    llm.complete("List of rivers:", max_tokens=decode_tokens)
    counts = []
    for r in range(rounds):
        prompts = [f"List of rivers ({r}.{i + 1}):" for i in range(requests)]
        with ThreadPoolExecutor(max_workers=requests) as pool:
            walls = list(pool.map(lambda p: llm.complete(p, max_tokens=decode_tokens).usage.wall_ms, prompts))
        counts.append(concurrent_requests(walls))
    return min(counts)


def concurrent_requests(walls_ms: list[float], *, slack: float = 1.5) -> int:
    """How many of equal requests sent together ran at once: those that finished within ``slack``
    times the first one's time (a server with c slots finishes them in tiers of c; one that
    serialises them finishes them one after another).

    >>> concurrent_requests([410, 405, 820, 815]), concurrent_requests([400, 800, 1200, 1600]), concurrent_requests([500, 510, 530, 520])
    (2, 1, 4)
    """
    first = min(walls_ms)
    return max(1, sum(1 for w in walls_ms if w <= slack * first))


def measure_batch_speedup(llm, concurrency: int, *, decode_tokens: int = 12) -> tuple[float, ...]:
    """Throughput of 1, 2, ... ``min(concurrency, 4)`` requests sent at once, relative to one.

    Each request is a short prompt and ``decode_tokens`` tokens (the decode-heavy shape of a tree
    node's answer); a backend that batches them (llama.cpp slots, a server's parallel slots) shows
    how much a wave of nodes really gains over running them one by one.
    """
    from concurrent.futures import ThreadPoolExecutor

    def wall(n: int) -> float:
        """Milliseconds until the last of ``n`` requests sent together finished (as the backend reports)."""
        prompts = [f"List of rivers ({i + 1}):" for i in range(n)]
        with ThreadPoolExecutor(max_workers=n) as pool:
            usages = list(pool.map(lambda p: llm.complete(p, max_tokens=decode_tokens).usage, prompts))
        return max(u.wall_ms for u in usages)

    one = wall(1)
    if one <= 0:
        return ()
    return (1.0,) + tuple(n * one / max(wall(n), 1e-9) for n in range(2, min(concurrency, 4) + 1))


def shape(plan: Plan) -> str:
    """'single', 'chain' (every node has at most one child) or 'branching'."""
    atoms = [n for n in plan.tree.nodes if n != ROOT]
    if len(atoms) <= 1:
        return "single"
    return "chain" if all(len(k) <= 1 for k in plan.tree.children.values()) else "branching"


def lower(
    plan: Plan,
    profile: BackendProfile = BackendProfile(),
    *,
    k: int = default("k"),
    force: str | None = None,
    simple: str = default("simple_plans"),
) -> PhysicalPlan:
    """Pick the cheapest operator the structural lowering considers (each registered operator says
    whether it is a candidate for this plan's shape; :meth:`~nlqo.execution.operators.base.PhysicalOperator.candidate`),
    or ``force`` one, and say why."""
    kind = shape(plan)
    estimates = {
        str(name): op.estimate(plan, profile, k) for name, op in OPERATORS.items() if op.candidate(kind, simple)
    }
    if force is not None and force in OPERATORS:
        operator, reason = OPERATORS[force].name, f"forced by --strategy {force}"
    else:
        operator = OPERATORS[min(estimates, key=lambda o: (estimates[o].ms, o))].name
        other = min((o for o in estimates if o != operator), key=lambda o: (estimates[o].ms, o))
        reason = (
            f"{kind} plan: {operator} est. {estimates[operator].ms / 1000:.1f} s < {other} est. "
            f"{estimates[other].ms / 1000:.1f} s (backend concurrency {profile.concurrency}{_concurrency_source(profile)}{_speedups(profile)}, "
            f"KV reuse {'on' if profile.kv_reuse else 'off'}, {profile.source} per-token costs: prefill "
            f"{profile.prefill_ms_per_token:.1f} ms, decode {profile.decode_ms_per_token:.0f} ms)"
        )
    hints = tuple(plan.query.atom(n).text() for n in plan.tree.postorder() if n != ROOT)
    return PhysicalPlan(
        operator=operator,
        logical=plan,
        estimates=estimates,
        reason=reason,
        hints=hints,
        waves=tuple(plan.tree.levels()),
    )


def _speedups(profile: BackendProfile) -> str:
    if len(profile.batch_speedup) < 2:
        return ""
    return ", measured batch throughput " + " ".join(f"{n}:{s:.2f}x" for n, s in enumerate(profile.batch_speedup, 1))


def _concurrency_source(profile: BackendProfile) -> str:
    return "" if profile.concurrency_source == "assumed" else f" ({profile.concurrency_source})"

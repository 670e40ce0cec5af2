"""Lowering: choose the physical operator for a logical plan by estimated cost.

Like a database choosing a join method, the estimate combines the plan's shape with per-call costs
of the backend: the linear template runs atoms one after another on one growing text whose prefix
is served from the KV cache; the tree runs each wave of independent nodes concurrently, as far as
the backend serves requests in parallel, but recomputes every prompt.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import attrs

from nlqo.config import default
from nlqo.kinds import Operator
from nlqo.runtime.llm.base import capabilities
from nlqo.optimizer.plan import ROOT, Plan

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
    operator: Operator
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


def estimate_linear(plan: Plan, profile: BackendProfile, k: int) -> Estimate:
    hops = max(1, len(plan.tree.nodes) - 1)
    per_hop_prompt = k * PASSAGE_TOKENS + 60
    generated = hops * (15 + 25) + 15 + 8
    computed = hops * per_hop_prompt + 40
    if not profile.kv_reuse:  # every generation re-reads the whole text, prefix included
        calls_context = sum(700 + h * per_hop_prompt for h in range(hops + 1))
        computed = 2 * calls_context
    ms = computed * profile.prefill_ms_per_token + generated * profile.decode_ms_per_token + hops * profile.retrieve_ms
    return Estimate(ms=ms, llm_calls=2 * hops + 2, generated_tokens=generated, computed_prompt_tokens=computed)


def estimate_tree(plan: Plan, profile: BackendProfile, k: int) -> Estimate:
    node_prompt = 250 + (k * PASSAGE_TOKENS + 120)
    node_generated = 15 + 8
    node_ms = (
        node_prompt * profile.prefill_ms_per_token + node_generated * profile.decode_ms_per_token + profile.retrieve_ms
    )
    ms = sum(profile.wave_ms(len(wave), node_ms) for wave in plan.tree.levels())
    n = len(plan.tree.nodes)
    return Estimate(
        ms=ms, llm_calls=2 * n - 1, generated_tokens=n * node_generated, computed_prompt_tokens=n * node_prompt
    )


def estimate_retrieve(profile: BackendProfile, k: int) -> Estimate:
    """One retrieval with the question and one short answer over its passages."""
    computed = k * PASSAGE_TOKENS + 120
    generated = 8
    ms = computed * profile.prefill_ms_per_token + generated * profile.decode_ms_per_token + profile.retrieve_ms
    return Estimate(ms=ms, llm_calls=1, generated_tokens=generated, computed_prompt_tokens=computed)


def estimate_iterate(profile: BackendProfile, k: int, rounds: int) -> Estimate:
    """``rounds`` retrievals, each followed by one short answer over its passages."""
    one = estimate_retrieve(profile, k)
    return Estimate(
        ms=rounds * one.ms,
        llm_calls=rounds,
        generated_tokens=rounds * one.generated_tokens,
        computed_prompt_tokens=rounds * one.computed_prompt_tokens,
    )


def lower(
    plan: Plan,
    profile: BackendProfile = BackendProfile(),
    *,
    k: int = default("k"),
    force: str | None = None,
    simple: str = default("simple_plans"),
) -> PhysicalPlan:
    """Pick the cheapest operator (or ``force`` one) and say why. With ``simple="retrieve"`` a
    single-atom plan may also be answered by one retrieval (:data:`Operator.RETRIEVE`)."""
    estimates = {
        Operator.LINEAR.value: estimate_linear(plan, profile, k),
        Operator.TREE.value: estimate_tree(plan, profile, k),
    }
    kind = shape(plan)
    if simple == Operator.RETRIEVE and kind == "single":
        estimates[Operator.RETRIEVE.value] = estimate_retrieve(profile, k)
    if force in Operator.values():
        operator, reason = Operator(force), f"forced by --strategy {force}"
    else:
        operator = Operator(min(estimates, key=lambda o: (estimates[o].ms, o)))
        other = Operator(min((o for o in estimates if o != operator), key=lambda o: (estimates[o].ms, o)))
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

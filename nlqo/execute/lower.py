"""Lowering: choose the physical operator for a logical plan by estimated cost.

Like a database choosing a join method, the estimate combines the plan's shape with per-call costs
of the backend: the linear template runs atoms one after another on one growing text whose prefix
is served from the KV cache; the tree runs each wave of independent nodes concurrently, as far as
the backend serves requests in parallel, but recomputes every prompt.
"""

from __future__ import annotations

import math
from typing import Mapping

import attrs

from nlqo.kinds import Operator
from nlqo.plan import ROOT, Plan

PASSAGE_TOKENS = 110
"""Prompt tokens one retrieved passage adds (80 words, title, numbering)."""


@attrs.frozen
class BackendProfile:
    """Per-token costs of a backend, measured or assumed, and how many requests it serves at once."""

    prefill_ms_per_token: float = 4.0
    decode_ms_per_token: float = 120.0
    concurrency: int = 1
    kv_reuse: bool = True
    retrieve_ms: float = 15.0
    source: str = "assumed"


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


_PROBE_TEXT = (
    "The river Thames flows through London, the capital of England. Paris lies on the Seine, "
    "Vienna and Budapest on the Danube, Cairo on the Nile and Rome on the Tiber. "
)


def measure_profile(llm, base: BackendProfile = BackendProfile(), *, long_prompt_repeats: int = 4, decode_tokens: int = 6) -> BackendProfile:
    """``base`` with per-token costs measured on ``llm`` by two probe calls.

    One call prefills a long prompt and generates one token, the other prefills a short one and
    generates ``decode_tokens``; their wall times and token counts give prefill and decode ms
    per token (a 2x2 linear system). If the backend reports no timings or the system is
    degenerate, ``base`` is returned unchanged (its ``source`` still says "assumed").
    """
    samples = []
    for prompt, max_tokens in ((_PROBE_TEXT * long_prompt_repeats, 1), ("Rivers:", decode_tokens)):
        usage = llm.complete(prompt, max_tokens=max_tokens).usage
        samples.append((usage.prompt_tokens - usage.cached_prompt_tokens, max(1, usage.generated_tokens), usage.wall_ms))
    (p1, g1, t1), (p2, g2, t2) = samples
    det = p1 * g2 - p2 * g1
    if det <= 0 or t1 <= 0 or t2 <= 0:
        return base
    prefill = (t1 * g2 - t2 * g1) / det
    decode = (p1 * t2 - p2 * t1) / det
    if prefill <= 0 or decode <= 0:
        return base
    return attrs.evolve(base, prefill_ms_per_token=prefill, decode_ms_per_token=decode, source="measured")


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
    node_ms = node_prompt * profile.prefill_ms_per_token + node_generated * profile.decode_ms_per_token + profile.retrieve_ms
    ms = 0.0
    for wave in plan.tree.levels():
        ms += math.ceil(len(wave) / max(1, profile.concurrency)) * node_ms
    n = len(plan.tree.nodes)
    return Estimate(ms=ms, llm_calls=2 * n - 1, generated_tokens=n * node_generated, computed_prompt_tokens=n * node_prompt)


def lower(plan: Plan, profile: BackendProfile = BackendProfile(), *, k: int = 3, force: str | None = None) -> PhysicalPlan:
    """Pick the cheaper operator (or ``force`` one) and say why."""
    estimates = {Operator.LINEAR.value: estimate_linear(plan, profile, k), Operator.TREE.value: estimate_tree(plan, profile, k)}
    kind = shape(plan)
    if force in Operator.values():
        operator, reason = Operator(force), f"forced by --strategy {force}"
    else:
        operator = Operator(min(estimates, key=lambda o: (estimates[o].ms, o)))
        other = Operator.TREE if operator == Operator.LINEAR else Operator.LINEAR
        reason = (
            f"{kind} plan: {operator} est. {estimates[operator].ms / 1000:.1f} s < {other} est. "
            f"{estimates[other].ms / 1000:.1f} s (backend concurrency {profile.concurrency}, "
            f"KV reuse {'on' if profile.kv_reuse else 'off'}, {profile.source} per-token costs: prefill "
            f"{profile.prefill_ms_per_token:.1f} ms, decode {profile.decode_ms_per_token:.0f} ms)"
        )
    hints = tuple(plan.query.atom(n).text() for n in plan.tree.postorder() if n != ROOT)
    return PhysicalPlan(operator=operator, logical=plan, estimates=estimates, reason=reason, hints=hints, waves=tuple(plan.tree.levels()))

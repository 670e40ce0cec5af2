"""Metamorphic oracles for the optimizer: checks that need no ground truth, as SQLancer's NoREC,
TLP and CERT test database optimizers. Each takes a query (or a plan) and raises
:class:`~nlqo.testing.invariants.InvariantError` saying what does not hold.

* :func:`check_optimal` - a plan that says ``exact`` costs what the brute-force oracle finds, and a
  plan from the greedy fallback or a cut beam never says ``exact``.
* :func:`check_invariance` - renaming variables, reordering atom and relation lines, and adding a
  duplicate atom (which the rewrite rules merge) change neither the plan's cost nor its tree.
* :func:`check_search_monotone` (CERT-style) - a larger search budget never gives a costlier plan,
  a budget of exactly what an unbounded search used still finishes it (one less does not), the
  exact DP is never costlier than greedy, and a narrow beam never beats the full search nor hides
  its cut.
* :func:`check_relation_cache_round_trip` - relations saved to a cache file answer the same query
  (atoms in another order) with no LLM call and the same relations; a torn file is refused.
* :func:`check_merge_context` - with context-aware merging every merge check shows the LLM the
  whole partial plan, and an edge the LLM rejects is not in the plan.

>>> from nlqo.testing.strategies import chain
>>> check_invariance(chain(3))
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Sequence

import attrs

from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.optimizer.dp import PROBES_PER_PAIR
from nlqo.errors import ConfigError
from nlqo.ir import Atom, Query, Var
from nlqo.kinds import RelationKind
from nlqo.runtime.llm.base import ChatMessage, Completion, Usage
from nlqo.common.passages import Embedder
from nlqo.optimizer.plan import ROOT, Plan
from nlqo.optimizer.relations import RelationCache, normalise_atom_text
from nlqo.testing.invariants import _fail
from nlqo.testing.oracle import cheapest

BIG_BUDGET = 10**9
"""A budget no test query exhausts."""


def _structural() -> CostModel:
    return load_cost_model("structural")


def _optimizer(model: CostModel | None = None, **options):
    from nlqo.optimizer.optimizer import Optimizer

    return Optimizer(cost_model=model or _structural(), **options)


def check_optimal(plan: Plan, model: CostModel, *, embedder: Embedder | None = None) -> None:
    """A plan that says ``exact`` is optimal: it covers as many atoms as any valid tree and costs
    what the cheapest of them costs. A plan from the greedy fallback or a cut beam does not say so."""
    stats = plan.stats
    if stats.exact and (stats.fallback or stats.method != "dp" or stats.beam_dropped):
        _fail(
            f"the plan says exact, but the search was {stats.method}, fallback={stats.fallback}, beam cut {stats.beam_dropped}"
        )
    if not stats.exact:
        return
    best = cheapest(plan, model, embedder=embedder)
    placed = len(plan.tree.parent)
    if placed < best.cover:
        _fail(f"the plan says exact but places {placed} atoms; a valid tree places {best.cover}")
    slack = 1e-9 * max(1.0, abs(best.cost)) if math.isfinite(best.cost) else 0.0  # -inf + inf would be NaN
    if plan.cost.total > best.cost + slack:
        _fail(f"the plan says exact but costs {plan.cost.total}; a valid tree costs {best.cost}")


def renamed(query: Query, suffix: str = "_r") -> Query:
    """The query with every variable renamed (``?x`` -> ``?x_r``)."""

    def term(t):
        return Var(t.name + suffix) if isinstance(t, Var) else t

    atoms = tuple(Atom(a.id, term(a.subject), term(a.predicate), term(a.object)) for a in query.atoms)
    answer = tuple(term(t) if isinstance(t, Var) else t for t in query.answer)
    return attrs.evolve(query, atoms=atoms, answer=answer)


def reordered(query: Query) -> Query:
    """The query with its atom lines and relation lines in reverse order."""
    return attrs.evolve(query, atoms=query.atoms[::-1], relations=query.relations[::-1])


def with_duplicate(query: Query) -> Query:
    """The query with a copy of its first atom under a new id (the rewrite rules merge it)."""
    first = query.atoms[0]
    new_id = next(f"dup{i}" for i in range(len(query.atoms) + 1) if f"dup{i}" not in query.ids)
    return attrs.evolve(query, atoms=(*query.atoms, attrs.evolve(first, id=new_id)))


def check_invariance(query: Query, model: CostModel | None = None) -> None:
    """Plans of equivalent queries agree. Planned without an LLM (undecided pairs are siblings)
    and with the default rewrite rules: renamed variables give the same tree and cost, reordered
    lines the same cost (a tie may break the other way), a duplicate atom the same tree and cost
    with the duplicate left out as merged."""
    optimizer = _optimizer(model)
    base = optimizer.optimize(query)
    for name, variant, same_tree in (
        ("renamed variables", renamed(query), True),
        ("reordered lines", reordered(query), False),
    ):
        other = optimizer.optimize(variant)
        if other.cost.total != base.cost.total:
            _fail(f"{name}: cost {other.cost.total}, the query itself {base.cost.total}")
        if same_tree and set(other.tree.parent) != set(base.tree.parent):
            _fail(f"{name}: tree {other.tree.parent}, the query itself {base.tree.parent}")
    doubled = with_duplicate(query)
    other = optimizer.optimize(doubled)
    dup = doubled.atoms[-1].id
    if other.cost.total != base.cost.total or set(other.tree.parent) != set(base.tree.parent):
        _fail(
            f"a duplicate atom changed the plan: {other.tree.parent} (cost {other.cost.total}), "
            f"without it {base.tree.parent} (cost {base.cost.total})"
        )
    reasons = {x.id: x.reason for x in other.left_out}
    if not reasons.get(dup, "").startswith("merged into"):
        _fail(f"the duplicate atom {dup} is not left out as merged: {reasons.get(dup)!r}")


def check_search_monotone(query: Query, model: CostModel | None = None) -> None:
    """Estimates move one way as the search gets more room (CERT-style): costs never rise with the
    budget, the exact DP is never costlier than greedy (budget 0), and a budget of exactly what the
    unbounded search used (its pairs, or a tenth of its looks for a pair if more) finishes it with the
    same cost, one less does not."""
    model = model or _structural()
    unbounded = _optimizer(model, rules=(), budget=BIG_BUDGET).optimize(query)
    # the DP stops on pairs and, ten times over, on looks for a pair: this budget just finishes it
    used = max(unbounded.stats.pairs, -(-unbounded.stats.looks // PROBES_PER_PAIR))
    costs = []
    for budget in sorted({0, used // 2, used, BIG_BUDGET}):
        plan = _optimizer(model, rules=(), budget=budget).optimize(query)
        if len(plan.tree.parent) == len(unbounded.tree.parent):
            costs.append((budget, plan.cost.total, plan))
    for (b1, c1, _), (b2, c2, _) in zip(costs, costs[1:]):
        if c2 > c1 + 1e-9 * max(1.0, abs(c1)):
            _fail(f"budget {b2} gives a costlier plan ({c2}) than budget {b1} ({c1})")
    for beam in (1, 2):
        narrow = _optimizer(model, rules=(), budget=BIG_BUDGET, beam=beam, llm=CacheFiller()).optimize(query)
        full = _optimizer(model, rules=(), budget=BIG_BUDGET, llm=CacheFiller()).optimize(query)
        if narrow.stats.exact and narrow.cost.total != full.cost.total:
            _fail(
                f"a beam of {beam} gives an exact plan costing {narrow.cost.total}; the full search {full.cost.total}"
            )
        if narrow.cost.total < full.cost.total - 1e-9 * max(1.0, abs(full.cost.total)):
            _fail(
                f"a beam of {beam} gives a cheaper plan ({narrow.cost.total}) than the full search ({full.cost.total})"
            )
    at_used = next((p for b, _, p in costs if b == used), None)
    if used and not unbounded.stats.fallback and (at_used is None or at_used.stats.fallback):
        _fail(
            f"a budget of {used} sub-plan pairs, what the unbounded search used ({unbounded.stats.pairs} pairs, "
            f"{unbounded.stats.looks} looks), did not finish the search"
        )
    if (
        used
        and not unbounded.stats.fallback
        and not _optimizer(model, rules=(), budget=used - 1).optimize(query).stats.fallback
    ):
        _fail(f"a budget of {used - 1} sub-plan pairs, one less than the unbounded search used, finished the search")


class CacheFiller:
    """A deterministic stand-in for the LLM's relation answers that counts its calls; with
    ``refuse`` every call fails (to prove a cache answered everything)."""

    name = "cache-filler"

    def __init__(self, refuse: bool = False):
        self.calls = 0
        self.refuse = refuse

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 8) -> Completion:
        raise NotImplementedError

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 8) -> Completion:
        if self.refuse:
            _fail("the LLM was asked about a pair the relation cache holds")
        self.calls += 1
        text = messages[-1].content
        a = text.split("\nA: ")[1].split("\n")[0]
        b = text.split("\nB: ")[1].split("\n")[0]
        # depends on the order of the pair, so that a cache that forgot to flip a reversed pair is seen
        kinds = (RelationKind.PARENT, RelationKind.CHILD, RelationKind.SIBLING, RelationKind.NONE)
        return Completion(kinds[(len(a) * 3 + len(b)) % 4].value, Usage(calls=1))


def _kind(table, a: str, b: str) -> RelationKind:
    if (a, b) in table:
        return RelationKind(table[(a, b)])
    return RelationKind(table[(b, a)]).flip()


def check_relation_cache_round_trip(
    query: Query, model: CostModel | None = None, *, folder: Path | None = None
) -> None:
    """Relations the LLM gave, saved to a cache file and loaded by a new cache, answer the same
    query with its atoms in reverse order without one LLM call, and give the same relations and cost;
    a torn cache file is refused with an error that names it."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(folder or scratch) / "relations.json"
        filler = CacheFiller()
        first = _optimizer(model, rules=(), llm=filler, cache=RelationCache.open(path)).optimize(query)
        again = _optimizer(model, rules=(), llm=CacheFiller(refuse=True), cache=RelationCache.open(path)).optimize(
            reordered(query)
        )
        asked = filler.calls + first.stats.cache_hits  # pairs of one text hit the cache already the first time
        if again.stats.cache_hits != asked:
            _fail(
                f"the cache answered {again.stats.cache_hits} pairs; the first run asked the LLM or the cache {asked}"
            )
        q = first.query
        for (a, b), kind in first.relations.items():
            if normalise_atom_text(q.atom(a)) == normalise_atom_text(q.atom(b)):
                continue  # two atoms of one text share a cache entry both ways round: nothing to flip
            if _kind(again.relations, a, b) != kind:
                _fail(f"pair {a}, {b}: {kind} before saving, {_kind(again.relations, a, b)} from the cache")
        if again.cost.total != first.cost.total:
            _fail(f"from the cache the plan costs {again.cost.total}, first {first.cost.total}")
        if filler.calls:
            text = path.read_text(encoding="utf-8")
            path.write_text(text[: len(text) // 2], encoding="utf-8")
            try:
                RelationCache.open(path)
            except ConfigError as exc:
                if str(path) not in str(exc):
                    _fail(f"the error for a torn cache file does not name it: {exc}")
            else:
                _fail("a torn relation cache file was read without an error")
            path.write_text(json.dumps({"a\tb": ["not", "a", "kind"]}), encoding="utf-8")
            try:
                RelationCache.open(path)
            except ConfigError:
                pass
            else:
                _fail("a foreign relation cache file was read without an error")


class MergeJudge(CacheFiller):
    """Answers relation questions as :class:`CacheFiller` does, and merge checks with ``yes``, or
    ``no`` for the first ``reject`` checks; keeps every merge prompt."""

    name = "merge-judge"

    def __init__(self, reject: int = 0):
        super().__init__()
        self.reject = reject
        self.merge_prompts: list[str] = []

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 8) -> Completion:
        text = messages[-1].content
        if "\nA: " in text:
            return super().chat(messages, stop=stop, max_tokens=max_tokens)
        self.merge_prompts.append(text)
        verdict = "no" if len(self.merge_prompts) <= self.reject else "yes"
        return Completion(verdict, Usage(calls=1))


def check_merge_context(query: Query, model: CostModel | None = None) -> None:
    """Context-aware merging: every merge check's prompt holds every atom of the partial plan it
    judges, checks are counted, and an edge the LLM rejects is not in the final plan."""
    judge = MergeJudge()
    plan = _optimizer(model, rules=(), llm=judge, context_merge=True).optimize(query)
    llm_edges = [
        (p, c)
        for c, p in plan.tree.parent
        if p != ROOT and plan.relation_source.get((p, c), plan.relation_source.get((c, p))) == "llm"
    ]
    if plan.stats.merge_checks != len(judge.merge_prompts):
        _fail(f"the plan counts {plan.stats.merge_checks} merge checks; the LLM was asked {len(judge.merge_prompts)}")
    if llm_edges and not judge.merge_prompts:
        _fail(f"LLM-decided edges {llm_edges} were never checked in context")
    for prompt in judge.merge_prompts:
        missing = [n for n, _ in plan.tree.preorder() if n != ROOT and plan.query.atom(n).text() not in prompt]
        if missing:
            _fail(f"a merge check did not show the LLM the partial plan: {missing} missing from its prompt")
    if not llm_edges:
        return
    rejecting = MergeJudge(reject=1)
    replanned = _optimizer(model, rules=(), llm=rejecting, context_merge=True).optimize(query)
    rejected = _rejected_edge(rejecting.merge_prompts[0], query)
    if rejected is not None and rejected in {(p, c) for c, p in replanned.tree.parent}:
        _fail(f"the LLM rejected {rejected[1]} under {rejected[0]}, and the plan still has that edge")
    if replanned.stats.merge_rejections < 1:
        _fail("the LLM rejected a merge and the plan counts no rejection")


def _rejected_edge(prompt: str, query: Query) -> tuple[str, str] | None:
    """The (parent, child) a merge prompt asked about, found by the atoms' texts."""
    texts = {a.text(): a.id for a in query.atoms}
    child = next((i for t, i in texts.items() if f"\nAttach: {t}\n" in prompt), None)
    parent = next((i for t, i in texts.items() if f"\nUnder: {t}\n" in prompt), None)
    return (parent, child) if child and parent else None


__all__ = [
    "CacheFiller",
    "MergeJudge",
    "check_invariance",
    "check_merge_context",
    "check_optimal",
    "check_relation_cache_round_trip",
    "check_search_monotone",
    "renamed",
    "reordered",
    "with_duplicate",
]

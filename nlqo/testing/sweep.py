"""The whole kit at once: every check of :mod:`nlqo.testing` on a corpus of queries and cost models.

:func:`sweep` runs the invariant checkers and the metamorphic oracles over :data:`CORPUS` under
each model of :func:`models` (or the models you pass), then the differential check on every
question of the fake world, and returns what failed. On the engine as it is nothing fails; the
seeded bugs of ``tests/seeded_bugs.py`` (not shipped: they rewrite the source of internal functions)
show that each check can. Besides chains, stars and pins, the corpus holds the places where the
search's limits and pruning decide: a short branch that a later, taller one makes the imbalance
(``growing branch``, eleven atoms: the brute-force oracle reaches it because its pins leave one atom
a choice), and a search whose looks for a partner are exactly ten per pair (``ten looks a pair``).

>>> sweep() == []  # the engine as it is: no check fails
True
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

import attrs

from nlqo.ir import Query, Relation
from nlqo.ir.syntax import parse
from nlqo.kinds import RelationKind
from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.testing.fakes import HashEmbedder
from nlqo.testing.invariants import check_cost_deterministic, check_cost_formula, check_declarations, check_plan
from nlqo.testing.oracles import (
    CacheFiller,
    check_invariance,
    check_merge_context,
    check_optimal,
    check_relation_cache_round_trip,
    check_search_monotone,
)
from nlqo.testing.strategies import chain, plan, star
from nlqo.testing.world import MOVIES, check_differential


GROWING_BRANCH = parse(
    'question "a short branch, and a later one that grows taller"\n'
    'q1 = (?r, "a", ?va)\nq2 = (?va, "a1", ?w)\nq3 = (?w, "x", "end")\nq4 = (?r, "b", ?vb)\nq5 = (?vb, "y", ?w)\n'
    'q6 = (?yy, "y1", "end")\nq7 = (?l, "l1", "end")\nq8 = (?r, "c", ?c1)\nq9 = (?c1, "c1", ?c2)\n'
    'q10 = (?c2, "c2", ?c3)\nq11 = (?c3, "c3", "end")\n'
    "relation q1 parent q2\nrelation q4 parent q5\nrelation q5 parent q6\nrelation q4 parent q7\nanswer ?r\n"
)
"""Three branches under the question; only q3 has a choice, under q2 (its branch q1 grows to height
2) or under q5 (q1 stays at height 1, q4's height and imbalance do not change). With q1 and q4 alone
the two choices tie on every field but the shortest child's height; the taller branch q8 (height 3)
then makes that the imbalance: 1 with q3 under q2, 2 under q5. A search that prunes without the
shortest child keeps the wrong one (mutants 27 and 33 of ``Order.of``; they need this many atoms)."""

CORPUS: tuple[tuple[str, Query], ...] = (
    ("chain of 4", chain(4)),
    ("star of 4", star(4)),
    ("star of 5", star(5)),
    ("star of 4 with a pin", attrs.evolve(star(4), relations=(Relation("q2", RelationKind.PARENT, "q3"),))),
    (
        "pinned comparison",
        parse(
            'question "Which came first, Jaws or Alien?"\n'
            'q1 = (?f1, "released in", ?y1)\nq2 = (?f2, "released in", ?y2)\nq3 = (?f1, "title", "Jaws")\n'
            'q4 = (?f2, "title", "Alien")\nq5 = (?first, "came before", ?other)\n'
            "relation q5 parent q1\nrelation q5 parent q2\nrelation q1 parent q3\nrelation q2 parent q4\nanswer ?first\n"
        ),
    ),
    (
        "bridge with a pin and an unreachable atom",
        parse(
            'question "In which country is the city where the director of Jaws was born the capital?"\n'
            'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nq3 = (?c, "capital of", ?n)\n'
            'q4 = (?x, "directed", "Alien")\nrelation q2 parent q1\nrelation q4 none q1\nanswer ?c\n'
        ),
    ),
    (
        "siblings and a duplicate",
        parse(
            'q1 = (?b, "formed in", ?city)\nq2 = (?b, "released", "Counterparts")\nq3 = (?b, "released", "Counterparts")\n'
            'q4 = (?city, "lies in", ?country)\nrelation q1 sibling q2\nanswer ?city\n'
        ),
    ),
    ("growing branch", GROWING_BRANCH),
    (
        "ten looks a pair",
        parse(
            'q1 = (?b, "p0", ?d)\nq2 = (?a, "p1", ?d)\nq3 = (?b, "p2", "x")\nq4 = (?a, "p3", ?a)\n'
            'q5 = (?c, "p4", "x")\nrelation q3 parent q2\nanswer ?a\n'
        ),
    ),
)
"""Queries the sweep plans: chains, stars, pins of every kind, a duplicate and an unreachable atom,
the growing branch, where the shortest child's height decides, and a search that needs exactly its
budget of looks (70 looks, 7 pairs: both limits are inclusive)."""

MODELS: tuple[tuple[str, str], ...] = (
    ("structural", ""),
    ("deep", "cost = imbalance - depth - edges"),
    ("bushy", "cost = depth + 2 * imbalance - size"),
    ("two-deep", "cost = abs(depth - 2) + imbalance - edges"),
    ("few-leaves", "cost = depth + leaves"),
)
"""Cost models the sweep plans under, by name and formula (empty: the shipped model of that name):
the shipped structural one, one that favours deep trees (so LLM-decided edges are used), one that
favours bushy ones, one that wants depth two (its ``abs`` moves both ways, so the DP must keep more
sub-plans), and one of depth and leaves alone (no imbalance, so the height is pruned on by its own
direction and the leaf count by its own)."""


def models() -> tuple[CostModel, ...]:
    """The cost models of :data:`MODELS`, built now: a metric's declaration is read as it is at the call."""
    return tuple(CostModel.parse(text, name=name) if text else load_cost_model(name) for name, text in MODELS)


@attrs.frozen
class Catch:
    """A check that failed: which, on what, and its message."""

    check: str
    case: str
    message: str


def _plans(query: Query, model: CostModel) -> Iterator:
    from nlqo.optimizer.optimizer import Optimizer

    yield Optimizer(cost_model=model).optimize(query)  # the default rewrite rules, no LLM
    yield plan(query, cost_model=model, seed=0)  # no rules, a stand-in LLM for undecided pairs
    yield Optimizer(cost_model=model, rules=(), budget=3).optimize(query)  # the greedy fallback
    yield Optimizer(cost_model=model, rules=(), beam=1).optimize(query)  # a beam that cuts
    yield Optimizer(cost_model=model, rules=(), llm=CacheFiller()).optimize(query)  # one-way LLM relations


def _plan_checks(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_plan(p, source=query)


def _optimality(query: Query, model: CostModel) -> None:
    for p in _plans(query, model):
        check_optimal(p, model)


def _with_similar(check: Callable[..., object]) -> Callable[[Query, CostModel], None]:
    """``check(model, plan)`` on every plan of :func:`_plans`, then on a plan of the shipped default model."""

    def run(query: Query, model: CostModel) -> None:
        for p in _plans(query, model):
            check(model, p)
        similar = load_cost_model("default")  # its similarity term embedded by HashEmbedder
        check(similar, plan(query, cost_model=similar, seed=0, embedder=HashEmbedder()), embedder=HashEmbedder())

    return run


def _declarations(query: Query, model: CostModel) -> None:
    check_declarations(model, plan(query, cost_model=model, seed=0))


CHECKS: tuple[tuple[str, Callable[[Query, CostModel], None]], ...] = (
    ("check_plan", _plan_checks),
    ("check_optimal", _optimality),
    ("check_cost_deterministic", _with_similar(check_cost_deterministic)),
    ("check_cost_formula", _with_similar(check_cost_formula)),
    ("check_invariance", lambda q, m: check_invariance(q, m)),
    ("check_search_monotone", lambda q, m: check_search_monotone(q, m)),
    ("check_relation_cache_round_trip", lambda q, m: check_relation_cache_round_trip(q, m)),
    ("check_merge_context", lambda q, m: check_merge_context(q, m)),
    ("check_declarations", _declarations),
)
"""The public kit's checks, in the order the sweep runs them (then ``check_differential``)."""


def _cases(
    corpus: Sequence[tuple[str, Query]], cost_models: Sequence[CostModel]
) -> Iterator[tuple[str, str, Callable[[], object]]]:
    """(check, case, run) for every check of the kit on every case it takes."""
    for check_name, check in CHECKS:
        for case, query in corpus:
            for model in cost_models:
                yield check_name, f"{case} / {model.name}", lambda c=check, q=query, m=model: c(q, m)  # type: ignore[misc]
    for question in MOVIES.questions:
        yield "check_differential", question, lambda q=question: check_differential(MOVIES, q)  # type: ignore[misc]


def sweep(
    *,
    first_only: bool = False,
    cost_models: Sequence[CostModel] | None = None,
    corpus: Sequence[tuple[str, Query]] = CORPUS,
) -> list[Catch]:
    """Run every check in :data:`CHECKS` on every query of ``corpus`` under every cost model (default:
    :func:`models`), then the differential check on every question of the fake world
    (:data:`nlqo.testing.world.MOVIES`); return what failed (with ``first_only``, stop at the first
    failure). A check that crashes counts as a catch too: a bug that makes the engine raise is found."""
    caught: list[Catch] = []
    for check_name, case, run in _cases(corpus, models() if cost_models is None else cost_models):
        try:
            run()
        except Exception as exc:  # an InvariantError, or the engine failing under a bug
            caught.append(Catch(check_name, case, f"{type(exc).__name__}: {exc}"))
            if first_only:
                return caught
    return caught


__all__ = ["CHECKS", "CORPUS", "GROWING_BRANCH", "MODELS", "Catch", "models", "sweep"]

"""The metamorphic oracles of nlqo.testing hold on random queries, and each is seen to fail."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.cost import CostModel, load_cost_model
from nlqo.ir import Var
from nlqo.relations import RelationCache
from nlqo.testing import InvariantError, check_cost_formula
from nlqo.testing.oracles import (
    check_invariance,
    check_merge_context,
    check_optimal,
    check_relation_cache_round_trip,
    check_search_monotone,
    renamed,
    reordered,
    with_duplicate,
)
from nlqo.testing.fakes import HashEmbedder
from nlqo.testing.strategies import chain, plan, queries, star
from nlqo.testing.world import MOVIES, World, check_differential

STRUCTURAL = load_cost_model("structural")
MODELS = st.sampled_from(
    [STRUCTURAL, CostModel.parse("cost = imbalance - depth - edges", name="deep"), load_cost_model("default")]
)


@settings(max_examples=40, deadline=None)
@given(queries(max_atoms=5), st.integers(0, 3), MODELS)
def test_plans_of_random_queries_pass_the_optimality_and_formula_oracles(query, seed, model):
    p = plan(query, cost_model=model, seed=seed, embedder=HashEmbedder())
    check_cost_formula(model, p, embedder=HashEmbedder())
    if not model.semantic:
        check_optimal(p, model)


@settings(max_examples=30, deadline=None)
@given(queries(max_atoms=5))
def test_equivalent_queries_plan_alike(query):
    check_invariance(query)


@settings(max_examples=30, deadline=None)
@given(queries(max_atoms=5), st.sampled_from([STRUCTURAL, CostModel.parse("cost = abs(depth - 2) - edges")]))
def test_more_search_never_costs_more(query, model):
    check_search_monotone(query, model)


@settings(max_examples=25, deadline=None)
@given(queries(max_atoms=5))
def test_relation_caches_round_trip(query):
    check_relation_cache_round_trip(query)


@settings(max_examples=25, deadline=None)
@given(queries(max_atoms=5))
def test_merge_checks_see_the_plan(query):
    check_merge_context(query, CostModel.parse("cost = imbalance - depth - edges", name="deep"))


def test_the_variants_are_what_they_say():
    q = chain(3)
    assert {v for a in renamed(q).atoms for v in a.variables} == {"v0_r", "v1_r", "v2_r"}
    assert renamed(q).answer == (Var("v0_r"),)
    assert reordered(q).ids == ("q3", "q2", "q1")
    doubled = with_duplicate(q)
    assert doubled.ids[-1] == "dup0" and attrs.evolve(doubled.atoms[-1], id="q1") == q.atoms[0]


def test_check_optimal_fails_on_a_plan_that_claims_an_optimum_it_missed():
    p = plan(star(3), cost_model=STRUCTURAL, seed=None)
    deep = CostModel.parse("cost = depth", name="depth")  # the bushy plan is the worst under this model
    worse = attrs.evolve(p, cost=attrs.evolve(p.cost, total=6.0))
    with pytest.raises(InvariantError, match="the plan says exact but costs 6.0; a valid tree costs 1.0"):
        check_optimal(worse, deep)
    greedy = attrs.evolve(p, stats=attrs.evolve(p.stats, fallback=True, method="greedy"))
    with pytest.raises(InvariantError, match="the plan says exact, but the search was greedy"):
        check_optimal(greedy, STRUCTURAL)


def test_the_cache_oracle_refuses_a_torn_file(tmp_path):
    path = tmp_path / "relations.json"
    path.write_text('{"a\\tb": "par')
    with pytest.raises(Exception, match=str(path)):
        RelationCache.open(path)
    (tmp_path / "fresh").mkdir()
    check_relation_cache_round_trip(star(3), folder=tmp_path / "fresh")


@pytest.mark.parametrize("question", sorted(MOVIES.questions))
def test_every_plan_and_lowering_gives_the_worlds_answer(question):
    assert check_differential(MOVIES, question) == MOVIES.questions[question][1]


def test_the_differential_check_fails_when_the_world_disagrees():
    wrong = World(MOVIES.facts, {q: (ir, "Paris") for q, (ir, _) in MOVIES.questions.items()})
    question = "In which town was the director of Alien born?"
    with pytest.raises(
        InvariantError, match="is 'Paris' in the world, but tree, structural, budget 50000: 'South Shields'"
    ):
        check_differential(wrong, question)


def test_the_world_solves_atoms_with_bindings():
    assert MOVIES.solve("?d directed Jaws", {}) == (("Steven Spielberg", "directed", "Jaws"), {"d": "Steven Spielberg"})
    assert MOVIES.solve("?d born in ?c", {}) is None  # two facts match: ambiguous
    assert MOVIES.solve("?d born in ?c", {"d": "Ridley Scott"})[1] == {"d": "Ridley Scott", "c": "South Shields"}

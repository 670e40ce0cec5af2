"""nlqo.testing.plan_score: plans against gold decompositions (issue 55).

The scorer's invariants are property-tested (a plan identical to the gold scores 1.0 on every
figure, every share stays in [0, 1], the score is deterministic); its parts are tested on hand-made
golds and plans; and a deliberately bad cost model is shown to score lower than the default on a
fixed set of gold questions with cached parses (tests/fixtures/plan_bench, see its ``about``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nlqo.config import EngineConfig
from nlqo.errors import CorpusError, InputFileError
from nlqo.eval.plan_bench import Planner, Variant, shipped_cost_models
from nlqo.ir.syntax import parse, render
from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.optimizer.optimizer import Optimizer
from nlqo.testing import HashEmbedder, plan_score
from nlqo.testing.gold import QUESTION, Gold, GoldStep, canonical, gold_of, load_gold
from nlqo.testing.plan_score import THRESHOLD, atom_words, entity_overlap, gold_plan
from nlqo.testing.strategies import plan, queries

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plan_bench"
WORDS = ("river", "born", "capital", "county", "father", "film", "director", "seat", "height", "team", "of", "in")
ENTITIES = ("Jaws", "Van Hook Township", "Mount Fuji", "Anna Benson", "Ohio")
BAD = CostModel.parse(
    'description "deliberately bad: rewards depth, penalises edges"\ncost = edges - 3 * depth', name="deep"
)
"""The cost model the test calls bad: PlanRAG's default penalises depth and rewards edges; this the reverse."""


@st.composite
def tree_golds(draw, max_steps: int = 6) -> Gold:
    """Golds whose edges make a tree: each step is used by at most one later step, written as ``#k``."""
    n = draw(st.integers(1, max_steps))
    parents = [draw(st.sampled_from([QUESTION, *range(j + 1, n)])) for j in range(n)]
    texts = []
    for i in range(n):
        words = " ".join(draw(st.lists(st.sampled_from(WORDS + ENTITIES), min_size=1, max_size=3)))
        refs = " ".join(f"#{c + 1}" for c in range(n) if parents[c] == i)
        entity = draw(st.one_of(st.none(), st.sampled_from(ENTITIES)))
        if refs:
            texts.append(draw(st.sampled_from([f"{refs} >> {words}", f"{words} {refs}", f"What {words} of {refs}?"])))
        else:
            texts.append(f"{entity} >> {words}" if entity else words)
    return Gold.from_steps("a question", texts)


def defined(score) -> dict:
    return {k: v for k, v in score.figures().items() if v is not None and k != "bare_leaf_share"}


# -- the invariants ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(tree_golds())
@example(Gold.from_steps("q", ["Ohio film", "Ohio >> film", "#1 >> capital"]))  # two steps with the same words
def test_a_plan_identical_to_the_gold_scores_one_on_every_figure(gold):
    score = plan_score(gold_plan(gold), gold)
    figures = defined(score)
    assert figures.pop("linear_degeneration", False) is False
    assert all(v == 1.0 for v in figures.values()), figures
    assert score.matched == gold.hops and {(m.step, m.atom) for m in score.matches} == {
        (i, f"s{i + 1}") for i in range(gold.hops)
    }


@settings(max_examples=40, deadline=None)
@given(tree_golds(), st.sampled_from(shipped_cost_models()), st.sampled_from([0, 50_000]))
def test_the_golds_own_ir_plans_back_into_the_gold_under_every_shipped_cost_model(gold, name, budget):
    """gold_plan's query pins the gold tree: rendered, parsed back and optimised (dp or greedy), it is the gold again."""
    query = parse(render(gold_plan(gold).query))
    p = Optimizer(cost_model=load_cost_model(name), embedder=HashEmbedder(), budget=budget).optimize(query)
    assert plan_score(p, gold).overall == 1.0


@settings(max_examples=120, deadline=None)
@given(queries(max_atoms=5), tree_golds(), st.floats(-1.0, 1.5), st.integers(0, 3))
def test_every_figure_of_any_plan_against_any_gold_is_in_the_unit_interval(query, gold, threshold, seed):
    score = plan_score(plan(query, seed=seed), gold, threshold=threshold)
    for name, value in score.figures().items():
        if value is not None:
            assert 0.0 <= float(value) <= 1.0, (name, value)
    assert 0 <= score.matched <= min(score.atoms, score.steps)
    assert len({m.atom for m in score.matches}) == len({m.step for m in score.matches}) == score.matched


@settings(max_examples=60, deadline=None)
@given(queries(max_atoms=5), tree_golds())
def test_the_score_is_deterministic(query, gold):
    p = plan(query)
    first = plan_score(p, gold)
    assert plan_score(p, gold) == first
    assert plan_score(p, gold, embedder=HashEmbedder()) == first  # a fresh embedder, the same figures
    assert plan_score(plan(query), Gold.from_steps(gold.question, [s.text for s in gold.steps])) == first


# -- the parts ---------------------------------------------------------------------------------------

VAN_HOOK = Gold.from_steps(
    "What is the seat of the county where Van Hook Township is located?",
    ["Van Hook Township >> located in the administrative territorial entity", "#1 >> capital"],
)


def optimise(ir: str, cost_model: str = "structural"):
    return Optimizer(cost_model=load_cost_model(cost_model), embedder=HashEmbedder()).optimize(parse(ir))


def test_the_matching_rule_words_entities_and_threshold():
    p = optimise(
        'q1 = ("Van Hook Township", "located in", ?county)\nq2 = (?county, "county seat", ?seat)\nanswer ?seat'
    )
    q1 = p.query.atom("q1")
    assert atom_words(q1) == "Van Hook Township located in"
    assert entity_overlap(q1, VAN_HOOK.steps[0].words) == 1.0 and entity_overlap(q1, VAN_HOOK.steps[1].words) == 0.0
    score = plan_score(p, VAN_HOOK)
    # q1 shares its entity and words with step 1; "county seat" (with the variables: "county county seat seat")
    # shares no word with "capital", so the hashed-word embedder cannot match q2 at the default threshold
    assert [(m.atom, m.step) for m in score.matches] == [("q1", 0)]
    assert (score.precision, score.recall, score.edge_recall) == (0.5, 0.5, 0.0)
    assert score.edge_outcomes["unmatched"] == 1 and score.relation_accuracy() is None
    assert score.depth_match and score.shape_match and score.linear_degeneration is None  # a chain, as the gold
    loose = plan_score(p, VAN_HOOK, threshold=-1.0)  # every pair passes: the matching is still one to one
    assert [(m.atom, m.step) for m in loose.matches] == [("q1", 0), ("q2", 1)] and loose.edge_recall == 1.0


def test_a_plan_that_hangs_the_steps_the_wrong_way_round_is_told_apart():
    """The gold edge found reversed is not found: the outcome says reversed, the parent-child pair is wrong."""
    p = optimise('q1 = (?t, "Van Hook Township located in", ?c)\nq2 = (?c, "capital", ?s)\nanswer ?t')
    score = plan_score(p, VAN_HOOK, threshold=0.3)
    assert [(m.atom, m.step) for m in score.matches] == [("q1", 0), ("q2", 1)]
    assert score.edge_outcomes["reversed"] == 1 and score.edges_found == 0
    assert score.bare_leaves == ("q2",) and score.bare_leaf_share == 1.0  # the leaf (?c, capital, ?s) names no entity
    assert score.relation_counts("parent-child") == (0, 1) and score.confusion == {"parent-child": {"reversed": 1}}


def test_siblings_none_pairs_and_linear_degeneration():
    gold = Gold.from_steps(
        "Would the top of Mount Fuji stick out of the Sea of Japan?",
        ["How tall is Mount Fuji?", "What is the maximum depth of the Sea of Japan?", "Is #1 greater than #2?"],
    )
    assert [gold.relation(a, b) for a, b, _ in gold.pairs()] == ["sibling", "parent-child", "parent-child"]
    assert not gold.chain and gold.depth == 2 and gold.shape == canonical({0: (1,), 1: (2, 3), 2: (), 3: ()}, 0)
    flat = optimise(
        'q1 = ("Mount Fuji", "how tall is", ?h)\nq2 = ("Sea of Japan", "maximum depth of", ?d)\n'
        'q3 = (?h, "greater than", ?d)\nanswer q3'
    )
    good = plan_score(flat, gold, threshold=0.3)
    assert good.matched == 3 and good.relation_accuracy("sibling") == 1.0 and good.linear_degeneration is False
    chained = optimise(
        'q1 = ("Mount Fuji", "how tall is", ?h)\nq2 = (?h, "maximum depth of Sea of Japan", ?d)\n'
        'q3 = (?d, "greater than", ?x)\nanswer ?x'
    )
    bad = plan_score(chained, gold, threshold=0.3)
    assert bad.linear_degeneration is True and bad.relation_accuracy("sibling") == 0.0 and not bad.shape_match
    # a pair the gold calls siblings is parent-child in the chain, whichever way round it hangs
    assert bad.confusion["sibling"] == {"parent-child": 1}
    assert bad.overall < good.overall == 1.0


def test_no_plan_counts_every_step_as_missed():
    score = plan_score(None, VAN_HOOK)
    assert (score.planned, score.precision, score.recall, score.edge_recall) == (False, None, 0.0, 0.0)
    assert score.overall == 0.0 and score.linear_degeneration is None and not score.shape_match


def test_gold_steps_references_and_dag_golds():
    assert GoldStep("What is the difference between 100,000 and #1?").refs == (1,)
    with pytest.raises(ValueError, match="may use only earlier steps"):
        Gold.from_steps("q", ["#2 >> capital", "Jaws >> director"])
    dag = Gold.from_steps("q", ["A", "B uses #1", "C uses #1", "#2 and #3"])  # step 1 used twice (StrategyQA has 7)
    assert dag.edges == {(1, 0), (2, 0), (3, 1), (3, 2)} and dag.parent[0] == 1  # the tree keeps the first user
    assert dag.relation(1, 2) == "sibling"  # both feed step 4, and share step 1's answer


def test_gold_of_reads_each_shared_set_and_skips_what_has_none():
    musique = gold_of(
        {"id": "m", "question": "Q?", "type": "2hop", "decomposition": [
            {"question": "Jaws >> director", "answer": "Steven Spielberg"}, {"question": "#1 >> place of birth"}]},
        "musique_dev_200",
    )  # fmt: skip
    assert musique.steps[0].answer == "Steven Spielberg" and musique.edges == {(1, 0)} and musique.textual
    strategy = gold_of({"id": "s", "question": "Q?", "decomposition": ["A?", "B?", "Is #1 more than #2?"]}, "sqa")
    assert strategy.hops == 3 and strategy.relation(0, 1) == "sibling"
    bridge = gold_of(
        {"question": "Q?", "type": "bridge_comparison", "supporting_facts": [["F1", 0], ["F2", 0], ["D1", 0]]},
        "2wiki_dev_300",
    )
    assert not bridge.textual and bridge.depth == 2 and not bridge.chain and bridge.steps[0].text == "F1"
    assert gold_of({"question": "Q?", "type": "comparison"}, "hotpotqa_dev_199") is None  # 2Wiki's shapes only
    assert plan_score(None, bridge).recall is None  # a shape-only gold has no matching figure


def test_load_gold_names_the_file_and_line_of_a_bad_record(tmp_path):
    bad = tmp_path / "musique_x.jsonl"
    bad.write_text('{"question": "Q?", "decomposition": ["#1 >> x"]}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"musique_x.jsonl:1: not a gold record"):
        load_gold(bad)
    with pytest.raises(InputFileError, match="expected a question file"):
        load_gold(tmp_path / "missing.jsonl")
    assert [g.dataset for g in load_gold(FIXTURES / "musique_dev_200.jsonl", limit=2)] == ["musique_dev_200"] * 2


# -- a bad cost model against the default, on cached parses of real gold questions ------------------


def fixture_scores(embedder) -> dict[str, list]:
    """(question type, gold is a chain, default's score, the bad model's score) per fixture question."""
    parses = json.loads((FIXTURES / "parses.json").read_text(encoding="utf-8"))["parses"]
    config = EngineConfig()
    default = Planner.load(Variant("default", "default", "dp"), config, embedder)
    bad = Planner(Variant("deep", "default", "dp"), BAD, default.rules, config, None)
    out = []
    for name in ("2wiki_dev_300", "musique_dev_200", "strategyqa_229"):
        for gold in load_gold(FIXTURES / f"{name}.jsonl"):
            entry = parses[gold.question]
            scores = [
                plan_score(p.plan(entry["ir"], gold.question, entry["relations"]), gold, embedder=embedder)
                for p in (default, bad)
            ]
            out.append((gold, *scores))
    return out


def check_bad_model_scores_lower(embedder) -> None:
    rows = fixture_scores(embedder)
    assert len(rows) == 12
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert mean([b.overall for _, _, b in rows]) < mean([d.overall for _, d, _ in rows])
    branching = [(d, b) for g, d, b in rows if not g.chain]
    assert mean([b.overall for _, b in branching]) < mean([d.overall for d, _ in branching])
    degenerate = lambda scores: sum(bool(s.linear_degeneration) for s in scores)  # noqa: E731
    assert degenerate([b for _, b in branching]) > degenerate([d for d, _ in branching]) == 0
    comparisons = [(d, b) for g, d, b in rows if g.kind == "comparison"]  # a flat gold, chained by the bad model
    assert all(d.shape_match and not b.shape_match for d, b in comparisons)
    # the hand-written StrategyQA parses leave the search no choice: both models plan the gold
    assert [(d.overall, b.overall) for g, d, b in rows if g.dataset == "strategyqa_229"] == [(1.0, 1.0)] * 2


def test_a_cost_model_that_rewards_depth_scores_lower_than_the_default_on_the_fixture():
    check_bad_model_scores_lower(HashEmbedder())


@pytest.mark.real_model
def test_the_bad_cost_model_scores_lower_with_the_real_embedder_too():
    from nlqo.runtime.embed import SentenceEmbedder
    from realmodels import load_or_skip

    check_bad_model_scores_lower(load_or_skip(SentenceEmbedder.load))


def test_the_default_threshold_is_the_one_the_cli_names_and_a_score_at_the_threshold_matches():
    from nlqo.cli import build_parser

    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices and "bench-plans" in a.choices)
    (option,) = [a for a in sub.choices["bench-plans"]._actions if a.dest == "threshold"]
    assert f"default: {THRESHOLD}," in option.help
    gold = Gold.from_steps("q", ["capital"])  # one word: its hashed vector is one-hot, its cosine with itself exactly 1
    assert plan_score(gold_plan(gold), gold, threshold=1.0).matched == 1
    assert plan_score(gold_plan(gold), gold, threshold=1.0 + 1e-9).matched == 0

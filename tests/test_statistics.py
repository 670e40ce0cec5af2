"""Statistics and the policy (issue 38): intervals, the file format, and no dominated choice."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.config import EngineConfig, default
from nlqo.errors import ConfigError
from nlqo.kinds import Operator
from nlqo.eval.collect import collect
from nlqo.planner.statistics.intervals import wilson
from nlqo.planner.statistics.policy import WITHIN, Candidate, choose
from nlqo.planner.statistics.store import ALL, MIN_CLASS, BUNDLED, load, save

candidates = st.lists(
    st.builds(
        lambda op, em, width, n, seconds: Candidate(op, em, max(0.0, em - width), min(1.0, em + width), n, seconds),
        st.sampled_from(["retrieve", "iterate", "linear", "tree", "cascade"]),
        st.floats(0, 1),
        st.floats(0, 0.3),
        st.integers(1, 500),
        st.floats(0.1, 100),
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda c: c.operator,
)


def dominated(c: Candidate, others) -> bool:
    return any(o.em >= c.em and o.seconds <= c.seconds and (o.em > c.em or o.seconds < c.seconds) for o in others)


@settings(max_examples=500)
@given(candidates, st.sampled_from(["quality", "balanced", "fast"]), st.one_of(st.none(), st.floats(0.1, 100)))
def test_no_policy_picks_an_operator_another_one_dominates(cands, policy, budget):
    choice = choose(cands, policy, time_budget=budget)
    pool = [c for c in cands if budget is None or c.seconds <= budget] or cands
    assert choice.operator in {c.operator for c in pool}
    assert not dominated(choice.chosen, pool)


@settings(max_examples=300)
@given(candidates)
def test_quality_is_never_worse_than_balanced_and_balanced_never_slower_than_quality(cands):
    quality, balanced, fast = (choose(cands, p).chosen for p in ("quality", "balanced", "fast"))
    assert quality.em >= balanced.em >= min(c.em for c in cands)
    assert fast.seconds <= balanced.seconds <= quality.seconds
    assert balanced.em >= max(c.em for c in cands) - default("em_margin") - WITHIN  # one EM point by default


@settings(max_examples=300)
@given(candidates, st.floats(0, 1))
def test_balanced_takes_the_fastest_operator_within_the_margin_of_the_best(cands, margin):
    pick = choose(cands, "balanced", em_margin=margin).chosen
    top = max(c.em for c in cands)
    assert pick.em >= top - margin - WITHIN
    assert all(c.em < top - margin - WITHIN for c in cands if c.seconds < pick.seconds)  # anything faster is outside
    # no margin: as good as the best; a margin of everything: the fastest
    assert choose(cands, "balanced", em_margin=0).chosen.em >= top - WITHIN
    assert choose(cands, "balanced", em_margin=1).chosen == choose(cands, "fast").chosen


def test_the_margin_is_one_em_point_by_default_a_setting_and_a_generated_flag():
    from nlqo.cli import build_parser
    from nlqo.cli.options import config_from_args

    assert EngineConfig().em_margin == default("em_margin") == 0.01
    args = build_parser().parse_args(["ask", "Who directed Jaws?", "--index", "idx", "--em-margin", "0.05"])
    assert config_from_args(args).em_margin == 0.05
    with pytest.raises(ConfigError, match="^the EM margin must not be negative, not -0.01$"):
        choose(CANDS, "balanced", em_margin=-0.01)


def test_a_budget_nothing_fits_runs_the_fastest_and_says_so():
    cands = [Candidate("tree", 0.6, 0.5, 0.7, 50, 30.0), Candidate("retrieve", 0.3, 0.2, 0.4, 50, 8.0)]
    choice = choose(cands, "quality", time_budget=2)
    assert choice.operator == "retrieve" and "none fits, the fastest runs" in choice.reason


CANDS = [
    Candidate("retrieve", 0.40, 0.30, 0.50, 50, 8.0),
    Candidate("iterate", 0.44, 0.34, 0.54, 50, 13.0),
    Candidate("tree", 0.30, 0.20, 0.40, 50, 28.0),
]


def test_each_policy_says_why_it_chose_and_keeps_the_candidates():
    reasons = {p: (choose(CANDS, p).operator, choose(CANDS, p).reason) for p in ("quality", "balanced", "fast")}
    assert reasons == {
        "quality": ("iterate", "best estimated EM 44.0%"),
        "balanced": (  # retrieve's 40.0% is 4 points below: outside the default margin of one
            "iterate",
            "fastest (est. 13.0 s) whose EM 44.0% is within the margin of 1 EM point of the best (iterate 44.0%, n=50)",
        ),
        "fast": ("retrieve", "fastest, est. 8.0 s"),
    }
    wide = choose(CANDS, em_margin=0.05)
    assert (wide.operator, wide.reason) == (
        "retrieve",
        "fastest (est. 8.0 s) whose EM 40.0% is within the margin of 5 EM points of the best (iterate 44.0%, n=50)",
    )
    choice = choose(CANDS)
    assert (choice.policy, choice.candidates, choice.chosen) == ("balanced", tuple(CANDS), CANDS[1])
    # a budget the operator's estimate just meets keeps it
    within = choose(CANDS, "quality", time_budget=13)
    assert (within.operator, within.reason) == ("iterate", "best estimated EM 44.0%; time budget 13 s")
    none_fits = choose(CANDS, "quality", time_budget=2.5)  # only the fastest is left to choose from
    assert (none_fits.operator, none_fits.reason) == (
        "retrieve",
        "best estimated EM 40.0%; time budget 2.5 s: none fits, the fastest runs",
    )


def test_ties_go_to_the_better_estimate_or_the_faster_operator():
    slow, quick = Candidate("tree", 0.5, 0.4, 0.6, 50, 20.0), Candidate("linear", 0.5, 0.4, 0.6, 50, 10.0)
    assert choose([slow, quick], "quality").operator == "linear"  # as good, faster
    worse, better = Candidate("retrieve", 0.3, 0.2, 0.4, 50, 5.0), Candidate("iterate", 0.6, 0.5, 0.7, 50, 5.0)
    assert choose([worse, better], "fast").operator == "iterate"  # as fast, better
    # an estimate exactly one EM point below the best lies within the margin; a little lower does not
    best, edge = Candidate("tree", 0.5, 0.4, 0.6, 50, 20.0), Candidate("retrieve", 0.49, 0.39, 0.59, 50, 5.0)
    assert choose([best, edge], "balanced").operator == "retrieve"
    below = Candidate("retrieve", 0.4899, 0.39, 0.59, 50, 5.0)
    assert choose([best, below], "balanced").operator == "tree"


def test_an_unmeasured_operator_ranks_below_every_measured_one_and_fast_weighs_only_its_time():
    unknown = Candidate("plugged", 0.0, 0.0, 1.0, 0, 1.0, "no statistics, EM unknown")
    poor = Candidate("tree", 0.001, 0.0, 0.2, 50, 30.0)
    assert [choose([unknown, poor], p).operator for p in ("quality", "balanced", "fast")] == ["tree", "tree", "plugged"]
    assert choose([unknown, poor], "balanced", em_margin=1).operator == "tree"  # any margin: only of measured ones
    alone = Candidate("other", 0.0, 0.0, 1.0, 0, 2.0)
    assert choose([alone, unknown], "quality").operator == choose([alone, unknown], "balanced").operator == "plugged"


def test_choosing_from_no_statistics_or_with_the_structural_policy_is_a_configuration_error():
    with pytest.raises(
        ConfigError, match="^no operator to choose from: the statistics measure none of the available operators$"
    ):
        choose([], "fast")
    with pytest.raises(ConfigError, match="^the structural policy chooses on the parsed plan, not from statistics$"):
        choose(CANDS, "structural")


@given(st.integers(0, 200), st.integers(1, 200))
def test_the_wilson_interval_holds_the_estimate_within_zero_and_one(hits, n):
    hits = min(hits, n)
    low, high = wilson(hits, n)
    assert 0 <= low <= hits / n <= high <= 1


def test_the_wilson_interval_narrows_with_the_sample_and_matches_a_known_value():
    assert wilson(20, 50) == pytest.approx((0.2761, 0.5382), abs=1e-4)
    assert wilson(200, 500)[1] - wilson(200, 500)[0] < wilson(20, 50)[1] - wilson(20, 50)[0]


def record(i: int, question: str, em: float, op: str = "retrieve") -> dict:
    return {"qid": str(i), "strategy": op, "question": question, "answer": "x", "em": em, "f1": em, "seconds": 2.0,
            "prompt_tokens": 10, "generated_tokens": 1, "llm_calls": 1, "trace": []}  # fmt: skip


def test_a_class_with_too_few_questions_borrows_the_estimate_over_all():
    yes_no = [record(i, "Is Jaws a film?", 1.0) for i in range(MIN_CLASS)]
    choice = [record(100 + i, "Which came first, Jaws or Alien?", 0.0) for i in range(MIN_CLASS - 1)]
    stats = collect(yes_no + choice + [record(999, "Who directed Jaws?", 0.0, "standard-rag")], measured_on={})
    assert stats.get("retrieve", "yes-no")[1] == "yes-no" and stats.get("retrieve", "yes-no")[0].em == 1.0
    assert stats.get("retrieve", "choice")[1] == ALL and stats.get("retrieve", "choice")[0].n == 2 * MIN_CLASS
    assert stats.get("tree", "other") is None
    assert stats.operators["retrieve"]["other"].n == 1  # standard-rag's records count as retrieve's
    assert "retrieve" in stats.operators and "standard-rag" not in stats.operators


def test_a_statistics_file_round_trips_and_a_foreign_or_torn_one_is_refused(tmp_path):
    stats = collect([record(i, "Who?", float(i % 2)) for i in range(10)], measured_on={"model": "m", "k": 3})
    path = save(stats, tmp_path / "statistics.json")
    again = load(path)
    assert again.operators == stats.operators and again.measured_on == stats.measured_on
    path.write_text(path.read_text()[:40])
    with pytest.raises(ConfigError, match=r"statistics.json: cannot read statistics: .*nlqo analyze"):
        load(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ConfigError, match="not an nlqo statistics file"):
        load(path)


def test_the_bundled_defaults_load_and_cover_every_built_in_operator():
    stats = load(BUNDLED, bundled=True)
    assert set(stats.operators) == set(Operator.values())  # an installed package's operator has none
    # the first 50 of each shared dev set; the cascade's own records from `nlqo analyze` on three of them
    assert {op: s[ALL].n for op, s in stats.operators.items()} == {
        "retrieve": 200, "iterate": 200, "linear": 200, "tree": 200, "cascade": 150,
    }  # fmt: skip
    assert len(stats.sample["sets"]) == 4 and all(len(ids) == 50 for ids in stats.sample["ids"].values())
    assert stats.calibration is not None and stats.calibration.n == 200
    assert stats.describe().startswith("bundled defaults")


def test_a_held_out_run_skips_the_calibration_questions(tmp_path):
    from nlqo.eval.datasets import QuestionSet

    path = tmp_path / "q.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answers": ["a"]}) + "\n" for i in range(6))
    )
    held = QuestionSet.load(path, limit=5, skip=2)
    assert [q.id for q in held.questions] == ["q2", "q3", "q4"]
    assert held.sha256 == QuestionSet.load(path).sha256

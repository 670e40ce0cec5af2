"""Metrics against hand-worked cases; question files; the LLM judge; per-strategy aggregation."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.errors import CorpusError
from nlqo.eval.datasets import OPEN, YES_NO, QuestionSet
from nlqo.eval.judge import LLMJudge
from nlqo.eval.metrics import (
    Interval,
    accuracy,
    bootstrap_diff,
    evidence_recall,
    exact_match,
    f1_score,
    normalize_answer,
    score,
    stray_yes_no,
    yes_no,
)
from nlqo.eval.summary import differences_table, markdown_table, paired_plan_groups, plan_outcomes, strategy_summary
from nlqo.runtime.llm.scripted import ScriptedLLM


def test_squad_normalisation():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("An apple, a pear and the plum.") == "apple pear and plum"
    assert normalize_answer("Théâtre-Français") == "théâtrefrançais"  # hyphen is punctuation, accents stay


@pytest.mark.parametrize(
    ("prediction", "golds", "em"),
    [
        ("Rush", ["Rush"], 1.0),
        ("rush.", ["Rush"], 1.0),
        ("the Rush", ["Rush"], 1.0),
        ("Rush band", ["Rush"], 0.0),
        ("Orioles", ["Pittsburgh Pirates", "Orioles", "Baltimore Orioles"], 1.0),  # an alias
        ("Baltimore", ["Pittsburgh Pirates", "Orioles", "Baltimore Orioles"], 0.0),
        ("", ["Rush"], 0.0),
    ],
)
def test_exact_match_against_all_aliases(prediction, golds, em):
    assert exact_match(prediction, golds) == em


def test_f1_is_the_best_over_aliases():
    # "baltimore orioles baseball" vs "orioles": 1 common of 3 predicted, 1 gold -> P 1/3, R 1, F1 0.5
    assert f1_score("the Baltimore Orioles baseball", ["Orioles"]) == pytest.approx(0.5)
    # vs alias "baltimore orioles": 2 common -> P 2/3, R 1, F1 0.8; the best alias wins
    assert f1_score("the Baltimore Orioles baseball", ["Orioles", "Baltimore Orioles"]) == pytest.approx(0.8)
    # repeated tokens count once per occurrence: "new new york" vs "new york" -> 2 common, P 2/3, R 1
    assert f1_score("new new york", ["New York"]) == pytest.approx(0.8)
    assert f1_score("Paris", ["London"]) == 0.0


def test_f1_requires_yes_no_to_match_exactly():
    assert f1_score("yes", ["yes"]) == 1.0
    assert f1_score("no", ["no way out"]) == 0.0
    assert f1_score("yes it is", ["yes"]) == 0.0


def test_accuracy_is_whole_word_containment():
    assert accuracy("It was released in 1974 by Rush.", ["1974"]) == 1.0
    assert accuracy("Spurs, i.e. Tottenham", ["Tottenham Hotspur", "Spurs"]) == 1.0
    assert accuracy("Rushmore", ["Rush"]) == 0.0
    assert accuracy("not known", ["no"]) == 0.0
    assert accuracy("anything", [""]) == 0.0


def test_yes_no_reduction():
    assert yes_no("Yes, because 75,000 is less.") == "yes"
    assert yes_no("The answer is no.") == "no"
    assert yes_no("Nobody knows") is None
    assert score("No, Albany GA is smaller.", ["no"], yes_no_question=True).em == 1.0
    unreduced = score("No, Albany GA is smaller.", ["no"])
    assert (unreduced.em, unreduced.f1, unreduced.acc) == (0.0, 0.0, 1.0)
    # no yes/no word: scored as written, and wrong
    assert score("Albany GA is smaller", ["no"], yes_no_question=True).em == 0.0


def test_bootstrap_is_seeded_and_paired():
    a = [1, 1, 1, 0, 1, 0, 1, 1, 0, 1]
    b = [0, 1, 0, 0, 1, 0, 0, 1, 0, 1]
    first, again = bootstrap_diff(a, b, seed=7), bootstrap_diff(a, b, seed=7)
    assert first == again
    assert first.mean == pytest.approx(0.3)
    assert first.low <= first.mean <= first.high
    assert 0.0 <= first.low and first.high <= 0.6  # the difference is 0 or 1 on 3 of 10 questions
    assert bootstrap_diff(a, a, seed=3) == Interval(0.0, 0.0, 0.0)
    assert bootstrap_diff([1] * 5, [0] * 5) == Interval(1.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        bootstrap_diff([1, 0], [1])


def test_evidence_recall_matches_titles():
    recall = evidence_recall(
        ["Neil Peart", "Rush (band)", "NEIL PEART", "Nobody's Hero"], ["Nobody's Hero", "Neil Peart"]
    )
    assert (recall.found, recall.total, recall.complete, recall.share) == (2, 2, True, 1.0)
    half = evidence_recall(["Neil Peart"], ["Nobody's Hero", "Neil Peart", "Neil Peart"])
    assert (half.found, half.total, half.share) == (1, 2, 0.5)
    assert evidence_recall([], ["A"]).share == 0.0
    assert evidence_recall(["A"], []) is None


def _write(path, records, gz=True):
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_question_files_and_kinds(tmp_path):
    yn = _write(tmp_path / "sqa.jsonl.gz", [
        {"id": "a", "question": "Is it?", "answers": ["yes"], "type": "strategyqa", "supporting_titles": ["X", "X", "Y"]},
        {"id": "b", "question": "Is it not?", "answers": ["No"]},
    ])  # fmt: skip
    qs = QuestionSet.load(yn)
    assert (qs.name, qs.kind, len(qs)) == ("sqa", YES_NO, 2)
    assert qs.questions[0].supporting_titles == ("X", "Y")
    assert len(qs.sha256) == 64
    mixed = _write(tmp_path / "mixed.jsonl", [
        {"id": 1, "question": "Is it?", "answers": ["yes"]},
        {"id": 2, "question": "Who?", "answer": "Rush"},
        {"id": 3, "question": "Where?", "answers": ["Montreal", "Montreal, Quebec"]},
    ], gz=False)  # fmt: skip
    qs = QuestionSet.load(mixed, limit=2)
    assert qs.kind == OPEN and [q.id for q in qs.questions] == ["1", "2"]
    assert qs.questions[1].answers == ("Rush",)


def test_bad_question_lines_name_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "question": "Q", "answers": ["A"]}\n\n{"id": 2, "question": "Q"}\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"bad.jsonl:3: missing field\(s\): answers"):
        QuestionSet.load(path)
    path.write_text('{"id": 1, "question": "Q", "answers": ["A"]}\nnot json\n', encoding="utf-8")
    with pytest.raises(CorpusError, match=r"bad.jsonl:2"):
        QuestionSet.load(path)
    with pytest.raises(CorpusError, match="no such question file"):
        QuestionSet.load(tmp_path / "absent.jsonl")


def test_shared_question_files(shared_data):
    hotpot = QuestionSet.load(shared_data / "hotpotqa_dev_199.jsonl.gz", limit=5)
    assert hotpot.kind == OPEN and hotpot.questions[0].answers == ("Rush",)
    assert hotpot.questions[0].supporting_titles == ("Nobody's Hero", "Neil Peart")
    strategy = QuestionSet.load(shared_data / "strategyqa_229.jsonl.gz")
    assert strategy.kind == YES_NO and len(strategy) == 229
    musique = QuestionSet.load(shared_data / "musique_dev_200.jsonl.gz", limit=3)
    assert len(musique.questions[2].answers) > 1  # aliases kept


def test_llm_judge_parses_yes_and_no():
    llm = ScriptedLLM([("Predicted answer: Toronto", "No, it is not."), ("Predicted answer", "Yes.")])
    judge = LLMJudge(llm)
    assert judge.grade("Where was he born?", ["Montreal, Quebec", "Montreal"], "in Montreal") is True
    assert judge.grade("Where was he born?", ["Montreal"], "Toronto") is False
    assert judge.grade("Where was he born?", ["Montreal"], "") is False
    assert len(llm.calls) == 2  # an empty prediction is not sent
    assert "Gold answers: Montreal, Quebec | Montreal" in llm.calls[0]


def test_strategy_summary_means_and_counts():
    rows = [
        {"em": 1.0, "f1": 1.0, "acc": 1.0, "seconds": 2.0, "prompt_tokens": 100, "cached_prompt_tokens": 60, "generated_tokens": 10,
         "hops": 2, "planning_ms": 500.0, "execution_ms": 1500.0, "judge": True, "evidence_complete": True, "evidence_share": 1.0,
         "stop_reason": "answer", "error": None},
        {"em": 0.0, "f1": 0.5, "acc": 1.0, "seconds": 4.0, "prompt_tokens": 50, "cached_prompt_tokens": 0, "generated_tokens": 30,
         "hops": 4, "planning_ms": 0.0, "execution_ms": 4000.0, "judge": None, "evidence_complete": False, "evidence_share": 0.5,
         "stop_reason": "max_rounds", "error": "ParseFailure: x"},
    ]  # fmt: skip
    s = strategy_summary(rows)
    assert (s["n"], s["em"], s["f1"], s["seconds"], s["generated_tokens"]) == (2, 0.5, 0.75, 3.0, 20.0)
    assert (s["computed_prompt_tokens"], s["cached_prompt_tokens"]) == (45.0, 30.0)
    assert (s["planning_s"], s["execution_s"]) == (0.25, 2.75)
    assert (s["judge_acc"], s["evidence_complete"], s["evidence_share"]) == (1.0, 0.5, 0.75)
    assert s["hops_histogram"] == {"2": 1, "4": 1}
    assert s["stop_reasons"] == {"answer": 1, "max_rounds": 1} and s["errors"] == 1
    assert s["parse_failed"] == 0


@pytest.mark.parametrize(
    "prediction, golds, stray",
    [("yes", ["Jaws"], True), ("No.", ["1975", "nineteen seventy-five"], True), ("Yes/no", ["Paris"], True),
     ("yes", ["yes"], False), ("no", ["Yes"], False), ("Yes, Paris", ["Paris"], False), ("Nolan", ["Jaws"], False)],
)  # fmt: skip
def test_stray_yes_no_is_a_bare_yes_or_no_to_an_open_question(prediction, golds, stray):
    assert stray_yes_no(prediction, golds) is stray


def test_the_summary_and_report_count_stray_yes_no_answers():
    from nlqo.eval.report import _stray_yes_no

    ircot = [{"em": 0.0, "answer": "yes", "answers": ["Free Guy"]}, {"em": 1.0, "answer": "no", "answers": ["no"]},
             {"em": 0.0, "answer": "Yes/no", "answers": ["Lancashire"]}]  # fmt: skip
    linear = [{"em": 1.0, "answer": "Free Guy", "answers": ["Free Guy"]}]
    summary = {
        "strategies": ["linear", "ircot"],
        "results": {"linear": strategy_summary(linear), "ircot": strategy_summary(ircot)},
    }
    assert summary["results"]["ircot"]["stray_yes_no"] == 2
    assert _stray_yes_no(summary).endswith(": ircot 2.")
    assert _stray_yes_no({"strategies": ["linear"], "results": {"linear": summary["results"]["linear"]}}) == ""


def test_the_table_counts_questions_whose_plan_did_not_parse():
    rows = [{"em": 1.0, "stop_reason": "root_answered"}, {"em": 0.0, "stop_reason": "parse_failed; terminator"},
            {"em": 0.0, "stop_reason": "parse_failed; max_hops"}]  # fmt: skip
    summary = {"strategies": ["tree"], "results": {"tree": strategy_summary(rows)}}
    row = markdown_table(summary).splitlines()[2].split(" | ")
    head = markdown_table(summary).splitlines()[0].split(" | ")
    assert row[head.index("parse failed")] == "2"


def test_differences_table_orients_pairs_against_a_strategy():
    summary = {"em_differences": [
        {"a": "auto", "b": "ircot", "diff": 0.1, "low": 0.0, "high": 0.2},
        {"a": "ircot", "b": "self-ask", "diff": 0.05, "low": -0.1, "high": 0.15},
        {"a": "iter-retgen", "b": "auto", "diff": 0.02, "low": -0.04, "high": 0.08},
    ]}  # fmt: skip
    table = differences_table(summary, against="auto")
    assert "| auto - ircot | +10.0 | [+0.0, +20.0] |" in table
    assert "| auto - iter-retgen | -2.0 | [-8.0, +4.0] |" in table
    assert "self-ask" not in table
    assert "self-ask" in differences_table(summary)


def test_records_name_the_operator_a_plan_was_lowered_to():
    from types import SimpleNamespace

    from nlqo.eval.datasets import Question
    from nlqo.eval.records import make_record
    from nlqo.execution.trace import RunResult

    question = Question(id="q", question="Who?", answers=("Rush",))
    lowered = [RunResult("Who?", "Rush", "auto", physical=SimpleNamespace(operator=op), stop_reason=reason, planning_ms=5.0)
               for op, reason in (("tree", "root_answered"), ("linear", "terminator"), ("linear", "max_hops"))]  # fmt: skip
    records = [make_record(question, 0, "auto", r, 1.0) for r in lowered]
    unplanned = RunResult("Who?", "Rush", "auto", stop_reason="parse_failed; terminator", planning_ms=5.0)
    records.append(make_record(question, 0, "auto", unplanned, 1.0))
    assert [r["operator"] for r in records] == ["tree", "linear", "linear", None]
    records[1]["em"] = 0.0
    s = strategy_summary(records)
    expected = {"linear": {"n": 2, "em": 0.5}, "tree": {"n": 1, "em": 1.0}, "parse_failed": {"n": 1, "em": 1.0}}
    assert (s["by_plan"], s["parse_failed"]) == (expected, 1)
    old = [{k: v for k, v in r.items() if k != "operator"} for r in records]  # written before the field existed
    assert strategy_summary(old)["by_plan"] == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 1.0]), st.sampled_from(["tree", "linear", None])),
                min_size=1, max_size=20))  # fmt: skip
def test_plan_groups_partition_the_questions_and_agree_with_each_strategy(questions):
    rows = {
        "linear": [{"em": a} for a, _, _ in questions],
        "tree": [
            {"em": b, "operator": op, "stop_reason": "root_answered" if op else "parse_failed; terminator"}
            for _, b, op in questions
        ],
    }
    groups = paired_plan_groups(rows)
    assert list(groups) == ["tree"]  # linear never plans
    assert sum(g["n"] for g in groups["tree"].values()) == len(questions)
    assert {k: g["em"]["tree"] for k, g in groups["tree"].items()} == pytest.approx(
        {k: v["em"] for k, v in plan_outcomes(rows["tree"]).items()}
    )
    for name in rows:  # the groups' n-weighted EM is the strategy's EM over all questions
        weighted = sum(g["n"] * g["em"][name] for g in groups["tree"].values()) / len(questions)
        assert weighted == pytest.approx(sum(r["em"] for r in rows[name]) / len(questions))


answer_texts = st.text(alphabet=st.sampled_from(list("ab yes no the, .!")), max_size=12)


@settings(max_examples=300, deadline=None)
@given(answer_texts, st.lists(answer_texts, min_size=1, max_size=3), answer_texts)
def test_answer_metrics_are_bounded_consistent_and_monotone_in_the_golds(prediction, golds, extra):
    assert normalize_answer(normalize_answer(prediction)) == normalize_answer(prediction)
    s = score(prediction, golds)
    assert s.em in (0.0, 1.0) and 0.0 <= s.f1 <= 1.0 and s.acc in (0.0, 1.0)
    if s.em == 1.0 and any(normalize_answer(g) == normalize_answer(prediction) != "" for g in golds):
        assert s.f1 == pytest.approx(1.0) and s.acc == 1.0
    more = score(prediction, [*golds, extra])  # another alias can only help
    assert more.em >= s.em and more.f1 >= s.f1 and more.acc >= s.acc


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0]), max_size=30), st.integers(0, 5))
def test_bootstrap_interval_holds_the_mean_and_is_zero_for_equal_scores(scores, seed):
    same = bootstrap_diff(scores, scores, seed=seed)
    assert (same.mean, same.low, same.high) == (0.0, 0.0, 0.0)
    other = [1.0 - x for x in scores]
    interval = bootstrap_diff(scores, other, seed=seed)
    assert interval.low - 1e-9 <= interval.mean <= interval.high + 1e-9
    assert bootstrap_diff(scores, other, seed=seed) == interval  # seeded

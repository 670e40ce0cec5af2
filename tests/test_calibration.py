"""Calibration of the model's confidence (issue 50): AUROC against a brute-force pair count, the fit
on an analyze sample (features, escalation table, cascade plan, its replayed mix), its storage in the
statistics file, version-1 files, and ``auto`` weighing the cascade as the mix it will run."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from nlqo.config import EngineConfig
from nlqo.errors import ConfigError
from nlqo.eval.collect import calibrate, collect, refit
from nlqo.main.engine import Engine
from nlqo.planner.statistics.calibration import (
    Calibration,
    FEATURES,
    Logistic,
    OperatorCalibration,
    Row,
    auroc,
    auroc_interval,
    fit,
    mix,
    replay,
)
from nlqo.planner.statistics.store import BUNDLED, VERSION, load, save
from nlqo.runtime.llm import ScriptedLLM
from nlqo.runtime.llm.scripted import word_confidence

scores = st.one_of(st.integers(-3, 3).map(float), st.floats(-1e6, 1e6, allow_nan=False))


@settings(max_examples=400)
@given(st.lists(st.tuples(scores, st.booleans()), max_size=40))
def test_auroc_is_the_share_of_right_wrong_pairs_ranked_right_with_ties_counted_half(pairs):
    values, labels = [s for s, _ in pairs], [y for _, y in pairs]
    right, wrong = [s for s, y in pairs if y], [s for s, y in pairs if not y]
    got = auroc(values, labels)
    if not right or not wrong:
        assert got is None
        return
    brute = sum(1.0 if r > w else 0.5 if r == w else 0.0 for r in right for w in wrong) / (len(right) * len(wrong))
    assert got == pytest.approx(brute, abs=1e-12)
    assert auroc([-v for v in values], labels) == pytest.approx(1 - brute, abs=1e-12)  # reversed ranking


@settings(max_examples=50)
@given(st.lists(st.tuples(scores, st.booleans()), min_size=2, max_size=30))
def test_the_bootstrap_interval_is_ordered_within_zero_and_one_and_repeatable(pairs):
    values, labels = [s for s, _ in pairs], [y for _, y in pairs]
    low, high = auroc_interval(values, labels)
    assert 0.0 <= low <= high <= 1.0
    assert auroc_interval(values, labels) == (low, high)  # a fixed seed


def test_auroc_counts_exactly_on_a_known_sample():
    # right answers score 3, 2, 2; wrong ones 2, 1: pairs (3>2, 3>1, 2=2, 2>1, 2=2, 2>1) = 5 of 6
    assert auroc([3, 2, 2, 2, 1], [True, True, True, False, False]) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="3 scores but 2 labels"):
        auroc([1, 2, 3], [True, False])


# A sample of 30 questions: retrieve's confidence rises with i and it is right only on confident
# questions (16, 18, ..., 28, 29); the template is right on most of retrieve's least confident ones
# (0-6, 8, 10), sure when right and unsure when wrong; iterate is right on 1 and 29.
N = 30
RETRIEVE_RIGHT = {16, 18, 20, 22, 24, 26, 28, 29}
LINEAR_RIGHT = {0, 1, 2, 3, 4, 5, 6, 8, 10}
ITERATE_RIGHT = {1, 29}
SECONDS = {"standard-rag": 8.0, "linear": 20.0, "iter-retgen": 13.0}


def lp(i: int) -> float:
    return round(-3.0 + 0.1 * i, 2)


def record(i: int, strategy: str, right: bool, logprob: float) -> dict:
    return {
        "qid": f"q{i}", "strategy": strategy, "question": f"Who was person {i}?", "answer": "Someone",
        "em": float(right), "f1": float(right), "seconds": SECONDS[strategy], "prompt_tokens": 100,
        "generated_tokens": 2, "llm_calls": 1, "trace": [],
        "confidence": word_confidence("Someone", logprob=logprob).to_dict(),
    }  # fmt: skip


def sample() -> list[dict]:
    out = []
    for i in range(N):
        out.append(record(i, "standard-rag", i in RETRIEVE_RIGHT, lp(i)))
        out.append(record(i, "linear", i in LINEAR_RIGHT, -0.2 if i in LINEAR_RIGHT else -2.0))
        out.append(record(i, "iter-retgen", i in ITERATE_RIGHT, -1.0))
    return out


def test_the_fit_measures_each_feature_and_names_the_best():
    cal = calibrate(sample())
    assert set(cal.operators) == {"retrieve", "linear", "iterate"} and cal.n == N
    retrieve = cal.operators["retrieve"]
    # confidence rises with i; of the 8 x 22 right-wrong pairs, 155 are ranked right (the 16 least confident
    # questions are wrong, and 17, 19, ..., 27 between the right ones)
    assert retrieve.features["reply.mean_logprob"].auroc == pytest.approx(155 / 176)
    assert retrieve.features["reply.mean_logprob"].n == N
    assert retrieve.features["reply.-mean_entropy"].auroc == 0.5  # constant: chance
    assert retrieve.best == "answer.mean_logprob" and retrieve.model is not None and retrieve.model.n == N
    assert retrieve.features["answer.mean_logprob"].right == len(RETRIEVE_RIGHT)
    assert cal.operators["iterate"].features["reply.min_logprob"].auroc == 0.5
    # no passage texts given: no 'supported' signal; the question's form is always known (none asks yes or no)
    assert set(retrieve.features) == {*FEATURES, "yes_no_question"}
    assert retrieve.features["yes_no_question"].auroc == 0.5 and "yes_no_question" not in retrieve.model.inputs
    # the mapping is monotone in the feature
    p = [retrieve.probability(word_confidence("x", logprob=v), {}) for v in (-3.0, -1.5, -0.1)]
    assert p[0] < p[1] < p[2]


def test_a_yes_no_question_is_a_signal_of_its_own_so_p_right_knows_an_answer_picks_one_of_two():
    # 40 questions at the same spread of confidence: the yes/no ones right 3 times in 4, the open ones 1 in 4
    rows = []
    for i in range(40):
        yes_no = i % 2 == 0
        right = (i // 2) % 4 != 0 if yes_no else (i // 2) % 4 == 0
        question = f"Is thing {i} big?" if yes_no else f"Who made thing {i}?"
        rows.append(
            {
                **record(i, "standard-rag", right, lp(i % 30)),
                "question": question,
                "answer": "yes" if yes_no else "Someone",
            }
        )
    retrieve = calibrate(rows).operators["retrieve"]
    assert retrieve.features["yes_no_question"].auroc == pytest.approx(0.75)  # (225 + 150 / 2) of 400 right-wrong pairs
    assert "yes_no_question" in retrieve.model.inputs
    sure = word_confidence("yes", logprob=-1.0)
    assert (
        retrieve.probability(sure, {"yes_no_question": True})
        > 0.5
        > retrieve.probability(sure, {"yes_no_question": False})
    )


def test_the_escalation_table_gives_each_operator_s_em_on_the_least_confident_questions():
    cal = calibrate(sample())
    third, half = cal.escalation["retrieve"]
    assert (third.part, third.n, third.threshold) == ("third", 10, pytest.approx(lp(10)))
    assert third.em == pytest.approx({"retrieve": 0.0, "linear": 0.8, "iterate": 0.1})
    assert (half.part, half.n) == ("half", 15)
    assert half.em == pytest.approx({"retrieve": 0.0, "linear": 9 / 15, "iterate": 1 / 15})


def test_the_cascade_plan_escalates_the_doubtful_half_to_the_template_and_estimates_the_mix():
    plan = calibrate(sample()).cascade
    assert (plan.feature, plan.target, plan.share, plan.n) == ("answer.mean_logprob", "linear", 0.5, N)
    assert plan.threshold == pytest.approx(lp(15))
    whole = plan.mixes["all"]
    # retrieve's 8 right answers are all confident; of the 15 escalated, the template's 9 right answers are kept
    assert whole.em == pytest.approx(17 / N) and whole.escalated == 0.5
    assert whole.seconds == pytest.approx(8.0 + 0.5 * 20.0)
    # with no doubtful question (share 0, no supported signal) every target ties: the fastest is named
    assert [(o.share, o.target) for o in plan.options] == [
        (0, "iterate"),
        (0.25, "linear"),
        (1 / 3, "linear"),
        (0.5, "linear"),
    ]
    assert [round(o.em * N) for o in plan.options] == [8, 15, 16, 17]  # nothing, 7, 8 and 9 answers gained
    assert plan.options[0].threshold is None and plan.options[0].escalated == 0.0


def test_a_share_that_escalates_more_for_less_than_one_em_point_gives_way_to_the_faster_one():
    # 120 questions, retrieve's confidence rising with i and right from i = 60; the template right on
    # 0-9 and on 35: escalating the least confident quarter gains 10 answers, a third 11 (0.8 points more)
    n = 120
    firsts = [
        Row(str(i), "other", float(i >= 60), 8.0, word_confidence("x", logprob=-3.0 + 0.02 * i)) for i in range(n)
    ]
    linear = [Row(str(i), "other", float(i < 10 or i == 35), 20.0, None) for i in range(n)]
    plan = fit({"retrieve": firsts, "linear": linear}).cascade
    assert [round(o.em * n) for o in plan.options] == [60, 70, 71, 71]
    assert (plan.share, plan.target) == (0.25, "linear") and plan.mixes["all"].em == pytest.approx(70 / n)


def test_the_replay_keeps_the_first_answer_where_the_escalated_one_is_trusted_less():
    def sure(value: float) -> OperatorCalibration:  # P(right) = sigmoid(value)
        model = Logistic(("reply.mean_logprob",), (0.0,), (1.0,), (1.0,), 0.0, 40)
        return OperatorCalibration(40, 0.5, {}, "reply.mean_logprob", model)

    def row(key: str, right: bool, value: float, seconds: float) -> Row:
        return Row(key, "other", float(right), seconds, word_confidence("x", logprob=value))

    firsts = [row("a", True, -2.0, 8.0), row("b", False, -2.0, 8.0), row("c", True, 0.0, 8.0)]
    # a: the escalated answer is trusted less (sigmoid(-3) < sigmoid(-2)): the first, right, is kept;
    # b: the escalated answer is trusted more and right; c: confident, never escalated
    escalated = {"a": row("a", False, -3.0, 20.0), "b": row("b", True, 1.0, 20.0), "c": row("c", False, 2.0, 20.0)}
    outcomes = replay(firsts, -1.0, "linear", escalated, sure(0), sure(0))
    assert [(o.em, o.escalated, o.kept_first, o.seconds) for o in outcomes] == [
        (1.0, True, True, 28.0),
        (1.0, True, False, 28.0),
        (1.0, False, False, 8.0),
    ]
    whole = mix(outcomes)
    assert (whole.em, whole.escalated, whole.kept_first, whole.seconds) == (1.0, 2 / 3, 0.5, pytest.approx(64 / 3))
    # iterate continues from the first round: only its extra seconds are added
    assert replay(firsts[:1], -1.0, "iterate", escalated, sure(0), sure(0))[0].seconds == 20.0


def test_the_calibration_round_trips_through_the_statistics_file(tmp_path):
    stats = collect(sample(), measured_on={"model": "m", "k": 3})
    assert stats.calibration is not None and stats.calibration.cascade is not None
    again = load(save(stats, tmp_path / "statistics.json"))
    assert again.calibration == stats.calibration and again.operators == stats.operators
    data = json.loads((tmp_path / "statistics.json").read_text())
    assert data["version"] == VERSION == 2
    assert data["calibration"]["cascade"]["n"] == N and data["calibration"]["operators"]["retrieve"]["model"]["n"] == N


def test_a_version_1_file_loads_without_calibration_and_other_versions_or_a_torn_calibration_are_refused(tmp_path):
    stats = collect(sample(), measured_on={"model": "m", "k": 3})
    data = stats.to_dict()
    path = tmp_path / "statistics.json"
    path.write_text(json.dumps({**{k: v for k, v in data.items() if k != "calibration"}, "version": 1}))
    old = load(path)
    assert old.calibration is None and old.operators == stats.operators
    path.write_text(json.dumps({**data, "version": 1}))  # a version-1 file's extra keys are not read
    assert load(path).calibration is None
    bundled = load(BUNDLED, bundled=True)  # refitted by scripts/confidence.py --bundle: a cascade plan to escalate by
    assert bundled.calibration is not None and bundled.calibration.cascade is not None
    path.write_text(json.dumps({**data, "version": 3}))
    with pytest.raises(ConfigError, match="version 3; this nlqo reads versions 1 to 2"):
        load(path)
    path.write_text(json.dumps({**data, "calibration": {"operators": {"retrieve": {"n": 1}}}}))
    with pytest.raises(ConfigError, match="cannot read statistics"):
        load(path)


def test_records_without_confidence_give_no_calibration_and_refit_replaces_it():
    bare = [{**r, "confidence": None} for r in sample()]
    stats = collect(bare, measured_on={})
    assert stats.calibration is None
    assert refit(stats, sample()).calibration == calibrate(sample())


def test_a_fit_too_small_for_a_mapping_gives_no_cascade_plan():
    rows = {
        "retrieve": [Row(f"q{i}", "other", float(i > 5), 8.0, word_confidence("x", logprob=lp(i))) for i in range(10)],
        "linear": [Row(f"q{i}", "other", 1.0, 20.0, word_confidence("x", logprob=lp(i))) for i in range(10)],
    }
    cal = fit(rows)
    assert cal.operators["retrieve"].model is None and cal.cascade is None and cal.trust() is None


def auto_engine(records: list[dict], **config) -> Engine:
    """An ``auto`` engine (quality policy, scripted model) choosing by the statistics of ``records``."""
    engine = Engine.from_config(
        EngineConfig(cost_model="structural", measure_costs=False, strategy="auto", policy="quality", **config),
        llm=ScriptedLLM([], default="x"),
        retriever=KeywordRetriever(PASSAGES),
        embedder=HashEmbedder(),
    )
    engine.statistics = collect(records, measured_on={"model": "m"})
    return engine


def test_auto_weighs_the_cascade_as_the_mix_it_will_run():
    engine = auto_engine(sample())
    choice = engine.choose("Who was person 3?")
    cascade = next(c for c in choice.candidates if c.operator == "cascade")
    assert cascade.em == pytest.approx(17 / N) and cascade.seconds == pytest.approx(18.0) and cascade.n == N
    assert cascade.basis == "other; calibrated mix: 50% escalated to linear"  # the class has 30 >= 8 questions
    assert choice.operator == "cascade"  # 56.7% against linear's 30.0%, retrieve's 26.7%


def planned_sample() -> list[dict]:
    """:func:`sample` with the tree on every question, wrong, its parse and plan taking 4 + (i % 3) seconds."""
    trees = [
        {**record(i, "linear", False, -2.5), "strategy": "tree", "seconds": 30.0, "planning_ms": 1000.0 * (4 + i % 3)}
        for i in range(N)
    ]
    return sample() + trees


def test_an_escalation_to_the_template_is_priced_with_the_tree_s_parse_and_plan_of_the_same_question():
    plan = calibrate(planned_sample()).cascade
    whole = plan.mixes["all"]
    assert (plan.target, plan.share, whole.escalated) == ("linear", 0.5, 0.5)  # the tree, always wrong, is no target
    escalated = range(15)  # the least confident half: questions 0-14, none of them unsupported-only
    assert whole.planning == pytest.approx(sum(4 + i % 3 for i in escalated) / N)  # 75 s over 30 questions
    assert whole.seconds == pytest.approx(8.0 + 0.5 * 20.0)  # the template's own seconds, as before
    chosen = next(o for o in plan.options if o.share == plan.share)
    assert chosen.seconds == pytest.approx(whole.seconds + 2.5)
    # escalating nothing plans nothing
    assert plan.options[0].escalated == 0 and plan.options[0].seconds == pytest.approx(8.0)


@pytest.mark.parametrize("plan_escalations, seconds, escalated", [(True, 20.5, 33.0), (False, 18.0, 28.0)])
def test_auto_counts_the_escalations_parse_and_plan_only_when_they_plan(plan_escalations, seconds, escalated):
    engine = auto_engine(planned_sample(), plan_escalations=plan_escalations)
    cascade = next(c for c in engine.choose("Who was person 3?").candidates if c.operator == "cascade")
    assert cascade.seconds == pytest.approx(seconds)
    assert ("their parse and plan 2.5 s a question" in cascade.basis) is plan_escalations
    # an escalated question: retrieve's 8 s, the template's 20 s and, planned, 5 s of parse and plan
    assert cascade.escalated_seconds == pytest.approx(escalated)


@pytest.mark.parametrize("stop_reason", ["cascade: escalated; terminator", "cascade: retrieve"])
def test_explain_analyze_sets_an_escalated_question_s_seconds_beside_those_it_was_estimated_by(stop_reason):
    from nlqo.execution.trace import RunResult
    from nlqo.explain.analyze import physical_lines

    engine = auto_engine(planned_sample())
    choice = engine.choose("Who was person 3?")
    physical = engine.unparsed("Who was person 3?", "cascade", choice=choice).physical
    result = RunResult("Who was person 3?", "x", "auto", stop_reason=stop_reason, execution_ms=40_000.0)
    (line,) = [ln.strip() for ln in physical_lines(physical, result) if "seconds: estimated" in ln]
    if stop_reason.startswith("cascade: escalated"):
        assert (
            line == "seconds: estimated 20.5 (the mix's mean; a question it escalates: 33.0), actual 40.0, q-error 1.95"
        )
    else:
        assert line == "seconds: estimated 20.5, actual 40.0, q-error 1.95"


def test_analyze_prints_the_calibration_escalation_and_cascade_tables():
    from nlqo.cli.analyze import calibration_table

    text = calibration_table(calibrate(sample()))
    lines = text.splitlines()
    assert lines[0].startswith(
        "Calibration: AUROC for exact match, 95% interval, n (AUROC interval: stratified bootstrap"
    )
    assert "| feature | iterate | linear | retrieve |" in lines
    row = next(line for line in lines if line.startswith("| answer.mean_logprob |"))
    assert "0.88* [" in row and "n=30" in row  # retrieve's 155/176, its best feature
    assert "| retrieve | lowest third (< -2.00) | 10 | 10.0% | 80.0% | 0.0% |" in lines
    assert any(
        line.startswith("Cascade: escalate retrieve's answer when answer.mean_logprob < -1.500") for line in lines
    )
    assert "| 50% (chosen) | -1.500 | linear | 60.0% | 50% | 56.7% | 18.0 |" in lines
    assert calibration_table(None).startswith("Calibration: none")


def test_a_cascade_plan_escalates_only_to_another_operator():
    data = collect(sample(), measured_on={}).to_dict()["calibration"]
    for target in ("cascade", "retrieve", "closed-book"):
        with pytest.raises(ValueError, match=f"a cascade escalates to one of linear, tree, iterate, not '{target}'"):
            Calibration.from_dict({**data, "cascade": {**data["cascade"], "target": target}})

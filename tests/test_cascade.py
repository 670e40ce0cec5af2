"""The cascade by calibrated confidence (issue 50) on scripted models: a confident supported answer
stops; a doubtful one escalates to the operator the statistics name; the answer the calibration
trusts more is kept; every decision carries its numbers into the trace and EXPLAIN; without a
calibration (or without confidence) the cascade decides by support as before."""

from __future__ import annotations

import json
import math

import pytest

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from nlqo.config import EngineConfig
from nlqo.explain import analyze, formats, render
from nlqo.main.engine import Engine
from nlqo.planner.statistics.calibration import Calibration, CascadePlan, Logistic, Mix, OperatorCalibration
from nlqo.planner.statistics.store import OperatorStats, Statistics, save
from nlqo.runtime.llm import ScriptedLLM
from nlqo.runtime.llm.scripted import word_confidence

QUESTION = "In which city was the director of Jaws born?"
RAG = "given documents"
IR = 'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city'
FEATURE = "answer.mean_logprob"


MEASURED = {"retrieve": {"all": OperatorStats(n=10, em=0.4, em_low=0.2, em_high=0.6)}}
"""A statistics file's least: one operator measured over all questions."""


def p_right(logprob: float, supported: bool) -> float:
    """The scripted calibration's P(right): sigmoid(logprob + 2 if supported)."""
    return 1 / (1 + math.exp(-(logprob + 2.0 * supported)))


def calibration(target: str, threshold: float | None = -1.0) -> Calibration:
    model = Logistic((FEATURE, "supported"), (0.0, 0.0), (1.0, 1.0), (1.0, 2.0), 0.0, 40)
    ops = {op: OperatorCalibration(40, 0.3, {}, FEATURE, model) for op in ("retrieve", "iterate", "linear", "tree")}
    plan = CascadePlan(FEATURE, threshold, target, 1 / 3, 40, {"all": Mix(40, 0.35, 0.21, 0.51, 15.0, 0.4, 0.1)})
    return Calibration(ops, {}, plan, n=40)


def engine(llm, cal: Calibration | None, **options) -> Engine:
    config = EngineConfig(
        cost_model="structural", measure_costs=False, kv_reuse=False, max_hops=2, repairs=0, **options
    )
    e = Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())
    e.statistics = Statistics(measured_on={"model": "scripted"}, operators={}, path="test", calibration=cal)
    return e


def in_turn(*logprobs: float):
    """A ScriptedLLM confidence: each reply's words at the next of ``logprobs`` (the last repeats)."""
    served: list[str] = []

    def confidence(text: str):
        logprob = logprobs[min(len(served), len(logprobs) - 1)]
        served.append(text)
        return word_confidence(text, logprob=logprob)

    return confidence


def decisions(result) -> list[dict]:
    return [{"text": s.text, **dict(s.decision)} for s in result.trace if s.node == "cascade"]


def test_a_confident_supported_first_answer_stops_with_its_numbers():
    llm = ScriptedLLM([(RAG, "Cincinnati")], confidence=in_turn(-0.1))
    result = engine(llm, calibration("linear")).ask(QUESTION, strategy="cascade")
    assert len(llm.calls) == 1 and result.answer == "Cincinnati" and result.stop_reason == "cascade: retrieve"
    (decision,) = decisions(result)
    assert decision == {
        "text": "retrieve's answer: answer.mean_logprob -0.10 >= threshold -1.00, found in the passages, "
        "P(right) 87.0%; stop (confident and supported)",
        "operator": "retrieve",
        "feature": FEATURE,
        "value": pytest.approx(-0.1),
        "threshold": -1.0,
        "supported": True,
        "p_right": pytest.approx(p_right(-0.1, True)),
        "kept": "retrieve",
        "why": "confident and supported",
    }


@pytest.mark.parametrize("target", ["iterate", "linear", "tree"])
def test_a_doubtful_answer_escalates_to_the_operator_the_statistics_name_and_keeps_it_when_trusted_more(target):
    llm = ScriptedLLM([("nlqo IR", IR), (RAG, "Cincinnati")], default="Cincinnati", confidence=in_turn(-3.0, -0.1))
    result = engine(llm, calibration(target)).ask(QUESTION, strategy="cascade")
    first, second = decisions(result)
    assert first["escalate_to"] == target and first["why"] == "confidence below the threshold"
    assert first["value"] == pytest.approx(-3.0) and first["p_right"] == pytest.approx(p_right(-3.0, True))
    assert first["text"].endswith(f"; escalate to {target} (confidence below the threshold)")
    nodes = {s.node for s in result.trace}
    ran = {"iterate": {"round-2", "round-3"} <= nodes, "linear": "hop-1" in nodes, "tree": "q1" in nodes}
    assert ran == {op: op == target for op in ran}  # the named operator ran, and no other
    assert ("parse" in nodes) == (target != "iterate")  # the template and the tree run on a parsed plan
    assert second["operator"] == target and second["kept"] == target and second["p_first"] == first["p_right"]
    assert second["p_right"] > second["p_first"]
    assert result.answer == "Cincinnati" and result.stop_reason.startswith("cascade: escalated")


@pytest.mark.parametrize("planned", [True, False])
def test_an_escalation_to_the_template_parses_and_plans_unless_switched_off(planned):
    llm = ScriptedLLM([("nlqo IR", IR), (RAG, "Cincinnati")], default="Cincinnati", confidence=in_turn(-3.0, -0.1))
    e = engine(llm, calibration("linear"), plan_escalations=planned)
    result = e.ask(QUESTION, strategy="cascade")
    nodes = [s.node for s in result.trace]
    assert ("parse" in nodes) is planned and "hop-1" in nodes
    assert nodes.index("cascade") < (nodes.index("parse") if planned else nodes.index("hop-1"))  # after the decision
    hinted = [c for c in llm.calls if "Plan step" in c]
    assert bool(hinted) is planned  # the plan's atoms reach the template as hints
    assert not planned or any("directed" in c and "Jaws" in c for c in hinted)
    assert result.stop_reason.startswith("cascade: escalated") and result.operator == "cascade"
    assert (result.escalation is not None) is planned
    if planned:  # EXPLAIN ANALYZE shows the plan the escalation ran, in text and JSON
        assert result.escalation.operator == "linear" and result.escalation.parsed
        text = analyze.text(result, result.physical)
        head = "Escalation's plan (LinearTemplate (TSSS), the question parsed and planned):"
        assert head in text and "directed" in text.split(head)[1] and "LinearTemplate hop 1 hint" in text
        data = analyze.to_dict(result, result.physical)
        atoms = {n["id"]: n for n in data["escalation"]["nodes"]}
        assert data["escalation"]["physical"]["operator"] == "linear" and {"q1", "q2"} <= set(atoms)
        assert atoms["q1"]["actual"]["llm_calls"] >= 1  # the hop's actuals land on its atom
        view = formats.PhysicalView.of(e.optimizer, result.physical, result)  # as nlqo explain --analyze
        shown = formats.render(view, "text").split(head)[1]
        own = result.escalation.logical.cost  # each plan's costs are its own, not the cascade's one atom
        assert f"Cost: {render._fmt(own.total)}" in shown and own.total != result.physical.logical.cost.total
        assert f"cost={render._fmt(own.total)}" in shown.splitlines()[2]  # the escalation's root line
        assert json.loads(formats.render(view, "json"))["escalation"]["cost"]["total"] == pytest.approx(own.total)
    else:
        assert "Escalation's plan" not in analyze.text(result, result.physical)


def test_an_escalated_answer_trusted_less_than_the_first_gives_way_to_it():
    # retrieve: Cincinnati, unsure (-1.5 < -1): P 62.2%; iterate's rounds say Ohio, much less sure: P 11.9%
    llm = ScriptedLLM([(RAG, ["Cincinnati", "Ohio", "Ohio"])], confidence=in_turn(-1.5, -4.0))
    result = engine(llm, calibration("iterate")).ask(QUESTION, strategy="cascade")
    assert len(llm.calls) == 3 and result.answer == "Cincinnati" and result.stop_reason == "cascade: kept first"
    assert result.confidence.answer.mean_logprob == pytest.approx(-1.5)  # the kept answer's own generation
    first, second = decisions(result)
    assert first["text"] == (
        "retrieve's answer: answer.mean_logprob -1.50 < threshold -1.00, found in the passages, P(right) 62.2%; "
        "escalate to iterate (confidence below the threshold)"
    )
    assert second == {
        "text": "iterate's answer: answer.mean_logprob -4.00, found in the passages, rounds disagree, P(right) 11.9% "
        "against retrieve's 62.2%; keep retrieve's (iterate's answer is trusted less (11.9% < 62.2%))",
        "operator": "iterate",
        "feature": FEATURE,
        "value": pytest.approx(-4.0),
        "supported": True,
        "agree": False,
        "yes_no_question": False,
        "p_right": pytest.approx(p_right(-4.0, True)),
        "p_first": pytest.approx(p_right(-1.5, True)),
        "kept": "retrieve",
        "why": "iterate's answer is trusted less (11.9% < 62.2%)",
    }


def test_a_confident_but_unsupported_answer_escalates_too():
    llm = ScriptedLLM([(RAG, ["Paris", "Cincinnati", "Cincinnati"])], confidence=in_turn(-0.1))
    result = engine(llm, calibration("iterate")).ask(QUESTION, strategy="cascade")
    first, second = decisions(result)
    assert (first["supported"], first["why"], first["escalate_to"]) == (False, "not found in the passages", "iterate")
    assert second["kept"] == "iterate" and result.answer == "Cincinnati"


def test_no_threshold_escalates_only_unsupported_answers():
    llm = ScriptedLLM([(RAG, "Cincinnati")], confidence=in_turn(-5.0))
    result = engine(llm, calibration("iterate", threshold=None)).ask(QUESTION, strategy="cascade")
    assert len(llm.calls) == 1 and result.stop_reason == "cascade: retrieve"
    assert decisions(result)[0]["text"].startswith("retrieve's answer: answer.mean_logprob -5.00, found in")


def test_explain_shows_each_decision_with_its_numbers_in_text_and_json():
    llm = ScriptedLLM([(RAG, ["Cincinnati", "Ohio", "Ohio"])], confidence=in_turn(-1.5, -4.0))
    result = engine(llm, calibration("iterate")).ask(QUESTION, strategy="cascade")
    text = analyze.text(result, result.physical)
    assert (
        "Cascade: retrieve's answer: answer.mean_logprob -1.50 < threshold -1.00, found in the passages, "
        "P(right) 62.2%; escalate to iterate (confidence below the threshold)" in text
    )
    assert "Cascade: iterate's answer: answer.mean_logprob -4.00" in text and "keep retrieve's" in text
    data = json.loads(json.dumps(analyze.to_dict(result, result.physical)))
    shown = data["physical"]["decisions"]
    assert [d["kept"] if "kept" in d else d["escalate_to"] for d in shown] == ["iterate", "retrieve"]
    assert shown[0]["threshold"] == -1.0 and shown[1]["p_first"] == pytest.approx(p_right(-1.5, True))
    steps = [s for s in data["analyze"]["trace"] if s["node"] == "cascade"]
    assert steps[1]["decision"]["p_right"] == pytest.approx(p_right(-4.0, True))
    assert all("decision" not in s for s in data["analyze"]["trace"] if s["node"] != "cascade")


def test_without_confidence_or_without_calibration_the_cascade_decides_by_support():
    llm = ScriptedLLM([(RAG, "Cincinnati")])  # a backend that reads no confidence
    result = engine(llm, calibration("iterate")).ask(QUESTION, strategy="cascade")
    assert [d["text"] for d in decisions(result)] == [
        "no confidence was read for retrieve's answer: the cascade decides by support",
        "retrieve's answer: found in the passages; stop",
    ]
    llm = ScriptedLLM([(RAG, "Cincinnati")], confidence=in_turn(-5.0))
    result = engine(llm, None).ask(QUESTION, strategy="cascade")
    assert [d["text"] for d in decisions(result)] == ["retrieve's answer: found in the passages; stop"]
    assert result.stop_reason == "cascade: retrieve"


def test_a_forced_cascade_reads_the_calibration_of_its_own_setup_only(tmp_path):
    from nlqo.main.builder import load_calibration

    path = save(
        Statistics(measured_on={"model": "m", "k": 3}, operators=MEASURED, calibration=calibration("linear")),
        tmp_path / "s.json",
    )
    assert load_calibration(EngineConfig(statistics=path), {"model": "m", "k": 3}).calibration == calibration("linear")
    assert load_calibration(EngineConfig(statistics=path), {"model": "other", "k": 3}) is None
    config = EngineConfig(model="m", strategy="cascade", statistics=path, cost_model="structural", measure_costs=False)
    e = Engine.from_config(
        config, llm=ScriptedLLM([], default="x"), retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()
    )
    assert e.calibration is not None and e.calibration.target == "linear"
    # bundled defaults measured with another model lend it no calibration
    e.statistics = Statistics(
        measured_on={"model": "qwen"}, operators={}, bundled=True, calibration=calibration("linear")
    )
    assert e.calibration is None

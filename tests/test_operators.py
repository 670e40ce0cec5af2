"""The operator library (issue 38): each operator through the engine on a scripted LLM, the
cascade's escalations, and ``auto`` choosing by statistics, skipping the parse when it can."""

from __future__ import annotations

import json

import pytest

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from nlqo.config import EngineConfig
from nlqo.errors import ConfigError
from nlqo.explain import analyze
from nlqo.main.engine import Engine
from nlqo.runtime.llm import ScriptedLLM
from nlqo.execution.operators import OPERATORS
from nlqo.planner.statistics.intervals import wilson
from nlqo.planner.statistics.store import OperatorStats, Statistics, save
from nlqo.eval.baselines import IterRetGen

QUESTION = "In which city was the director of Jaws born?"
RAG = "given documents"
IR = 'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?city)\nanswer ?city'


MEASURED = {"retrieve": {"all": OperatorStats(n=10, em=0.4, em_low=0.2, em_high=0.6)}}
"""A statistics file's least: one operator measured over all questions."""


def engine(llm, **options) -> Engine:
    config = EngineConfig(
        cost_model="structural", measure_costs=False, kv_reuse=False, max_hops=2, repairs=0, **options
    )
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())


def stats(**em: float) -> Statistics:
    """Statistics over 50 questions with the given EM per operator and seconds rising in registry order."""
    ops = {}
    for seconds, (op, value) in enumerate(em.items(), 1):
        low, high = wilson(value * 50, 50)
        ops[op] = {"all": OperatorStats(n=50, em=value, em_low=low, em_high=high, seconds=float(seconds))}
    return Statistics(measured_on={"model": "scripted"}, operators=ops, path="test")


def test_iterate_asks_what_the_iter_retgen_baseline_asks_and_answers_alike():
    own, baseline = (
        ScriptedLLM([(RAG, ["Spielberg", "Cincinnati", "Cincinnati"])]),
        ScriptedLLM([(RAG, ["Spielberg", "Cincinnati", "Cincinnati"])]),
    )
    result = engine(own).ask(QUESTION, strategy="iterate")
    expected = IterRetGen(baseline, KeywordRetriever(PASSAGES), k=3).run(QUESTION)
    assert own.calls == baseline.calls and len(own.calls) == 3
    assert result.answer == expected.answer == "Cincinnati" and result.hops == 3
    assert [s.node for s in result.trace if s.kind == "retrieve"] == ["round-1", "round-2", "round-3"]


def test_every_operator_runs_through_the_engine_and_explains():
    llm = ScriptedLLM([("nlqo IR", IR), (RAG, "Cincinnati")], default="Cincinnati")
    for op in OPERATORS:
        result = engine(llm).ask(QUESTION, strategy=str(op))
        assert result.physical.operator == op and result.answer
        text = analyze.text(result, result.physical)
        assert f"Physical plan: {OPERATORS[op].label}" in text
        assert (
            json.loads(json.dumps(analyze.to_dict(result, result.physical)))["physical"]["parsed"]
            == OPERATORS[op].needs_plan
        )


def test_the_cascade_stops_at_a_supported_first_answer():
    llm = ScriptedLLM([(RAG, "Cincinnati")])
    result = engine(llm).ask(QUESTION, strategy="cascade")
    assert len(llm.calls) == 1 and result.answer == "Cincinnati" and result.stop_reason == "cascade: retrieve"
    assert [s.text for s in result.trace if s.node == "cascade"] == ["retrieve's answer: found in the passages; stop"]


def test_an_unsupported_answer_escalates_to_iterate_and_agreeing_supported_rounds_stop_there():
    llm = ScriptedLLM([(RAG, ["Paris", "Cincinnati", "Cincinnati"]), ("nlqo IR", IR)], default="Cincinnati")
    result = engine(llm).ask(QUESTION, strategy="cascade")
    # round 1 said Paris (in no passage); rounds 2 and 3 said Cincinnati, but the rounds disagree
    assert result.stop_reason.startswith("cascade: plan")
    llm = ScriptedLLM([(RAG, ["Paris", "Paris", "Paris"]), ("nlqo IR", IR)], default="Cincinnati")
    result = engine(llm).ask(QUESTION, strategy="cascade")
    decisions = [s.text for s in result.trace if s.node == "cascade"]
    assert decisions == [
        "retrieve's answer: not found in the passages; iterate",
        "iterate's answer: not found in the passages; plan",
    ]
    assert any(s.node == "parse" for s in result.trace) and result.answer == "Cincinnati"


def test_auto_choosing_an_operator_that_needs_no_plan_does_not_parse_and_explains_why():
    llm = ScriptedLLM([(RAG, "Cincinnati")])
    e = engine(llm, strategy="auto")
    e.statistics = stats(retrieve=0.435, iterate=0.44, tree=0.30)  # retrieve is within the 1-point margin, faster
    result = e.ask(QUESTION)
    assert result.physical.operator == "retrieve" and len(llm.calls) == 1 and "nlqo IR" not in llm.calls[0]
    text = analyze.text(result, result.physical)
    assert "-> retrieve" in text and "   iterate" in text and "tree" in text
    assert "skipped: no parse: retrieve needs no plan" in text and "q-error" in text
    choice = analyze.to_dict(result, result.physical)["physical"]["choice"]
    assert {c["operator"] for c in choice["candidates"]} == {"retrieve", "iterate", "tree"} and choice["q_error"] >= 1


def test_auto_choosing_the_tree_parses_first():
    llm = ScriptedLLM([("nlqo IR", IR)], default="Cincinnati")
    e = engine(llm, strategy="auto", policy="quality")
    e.statistics = stats(retrieve=0.20, tree=0.60)
    result = e.ask(QUESTION)
    assert (
        result.physical.operator == "tree" and "nlqo IR" in llm.calls[0] and result.physical.choice.operator == "tree"
    )


def test_a_time_budget_leaves_out_slow_operators():
    e = engine(ScriptedLLM([(RAG, "Cincinnati")], default="x"), strategy="auto", policy="quality", time_budget=1.5)
    e.statistics = stats(retrieve=0.20, tree=0.60)
    assert e.plan(QUESTION).physical.operator == "retrieve"


def test_statistics_of_another_model_are_refused_naming_the_difference(tmp_path):
    from nlqo.main.builder import load_statistics

    path = save(
        Statistics(measured_on={"model": "qwen2.5-coder-1.5b", "k": 3}, operators=MEASURED),
        tmp_path / "statistics.json",
    )
    with pytest.raises(ConfigError, match=r"model 'qwen2.5-coder-1.5b', not 'smollm2-135m'.*nlqo analyze"):
        load_statistics(EngineConfig(statistics=path), {"model": "smollm2-135m", "k": 3})
    with pytest.raises(ConfigError, match=r"k 3, not 5"):
        load_statistics(EngineConfig(statistics=path), {"model": "qwen2.5-coder-1.5b", "k": 5})
    assert load_statistics(EngineConfig(statistics=path), {"model": "qwen2.5-coder-1.5b", "k": 3}).path == str(path)


def test_without_statistics_auto_uses_the_bundled_defaults_and_says_so():
    e = engine(ScriptedLLM([(RAG, "Cincinnati")], default="x"), strategy="auto")
    choice = e.plan(QUESTION).physical.choice
    assert choice.statistics.startswith("bundled defaults") and "run 'nlqo analyze' for this setup" in choice.statistics
    assert {c.operator for c in choice.candidates} == {str(op) for op in OPERATORS}

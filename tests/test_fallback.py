"""An empty answer gets one more, span-constrained try, then an explicit "no answer"."""

from __future__ import annotations

import json

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from nlqo.config import EngineConfig
from nlqo.main.engine import Engine
from nlqo.execution.fallback import NO_ANSWER, span_constraint, spans
from nlqo.execution.trace import Trace
from nlqo.runtime.llm import ScriptedLLM

QUESTION = "In which city was the director of Jaws born?"


def engine(llm) -> Engine:
    config = EngineConfig(strategy="linear", measure_costs=False, cost_model="structural")
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())


def template_llm(final: str, fallback: str) -> ScriptedLLM:
    """A linear run that asks one question, then answers ``final``; the fallback prompt gets ``fallback``."""
    return ScriptedLLM(
        [
            ("Answer the question from the contexts", fallback),
            ("Question:$", [" Who directed the film Jaws?", " In which city was the director of Jaws born?"]),
            ("Based on the contexts,$", " Steven Spielberg directed Jaws."),
            ("is:$", final),
        ]
    )


def test_an_answer_is_kept_and_costs_no_extra_call():
    llm = template_llm(" Cincinnati.", "Toronto")
    result = engine(llm).ask(QUESTION)
    assert result.answer == "Cincinnati" and "fallback" not in result.stop_reason
    assert not any("Answer the question from the contexts" in c for c in llm.calls)


def test_an_empty_answer_is_asked_again_over_the_passages_the_run_retrieved():
    llm = template_llm(" ", "Cincinnati")
    trace = Trace()
    result = engine(llm).ask(QUESTION, trace=trace)
    assert result.answer == "Cincinnati"
    assert result.stop_reason.endswith("; fallback_answer")
    last = result.trace[-1]
    assert last.node == "fallback" and "empty" in last.note
    asked = llm.calls[-1]
    retrieved = {p.title for s in result.trace if s.kind == "retrieve" for p in s.passages}
    assert retrieved and all(title in asked for title in retrieved)
    assert trace.steps[-1] is last  # the caller's trace sees the step too


def test_a_demonstration_answer_no_passage_holds_is_asked_again():
    # the linear template's demonstration answers 1979 (Alien's year); these passages hold no year
    llm = template_llm(" 1979.", "Cincinnati")
    result = engine(llm).ask(QUESTION)
    assert result.answer == "Cincinnati" and result.stop_reason.endswith("; fallback_answer")
    assert "'1979' is a prompt demonstration's" in result.trace[-1].note
    copied_again = engine(template_llm(" 1979.", "1979")).ask(QUESTION)  # a backend that cannot constrain
    assert copied_again.answer == "" and copied_again.stop_reason.endswith(f"; {NO_ANSWER}")


def test_a_demonstration_answer_a_passage_holds_is_kept():
    llm = template_llm(" Steven Spielberg.", "Toronto")  # a demonstration's answer, and in the passages
    result = engine(llm).ask("Who directed Jaws?")
    assert result.answer == "Steven Spielberg" and "fallback" not in result.stop_reason


def test_no_answer_at_all_is_said_in_the_json_and_the_stop_reason():
    result = engine(template_llm(" ", "")).ask(QUESTION)
    assert result.answer == "" and result.stop_reason.endswith(f"; {NO_ANSWER}")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["no_answer"] is True and data["stats"]["stop_reason"].endswith(NO_ANSWER)


def test_spans_are_short_runs_of_the_passages_plus_yes_and_no():
    found = spans(["Steven Spielberg was born in Cincinnati, Ohio."], max_words=3)
    assert "Cincinnati, Ohio" in found and "Cincinnati" in found and "born in Cincinnati" in found
    assert "Spielberg was born in" not in found  # four words
    assert found[-2:] == ["yes", "no"] and len(found) == len(set(found))
    assert span_constraint(["a b"]).grammar == 'start: "a" s1? | "b" | "yes" | "no"\ns1: " b"'
    assert all(s == s.strip() for s in spans(["Jaws ( born 1975 )"], max_words=2))  # not ' born'


def test_a_runs_distinct_passages_keep_first_retrieval_order_and_best_score():
    from nlqo.execution.fallback import best_passages
    from nlqo.execution.trace import PassageRef, RunResult, Step

    def hop(node, *refs):
        return Step(
            node=node, kind="retrieve", passages=tuple(PassageRef(i, i.upper(), s, text=f"text {i}") for i, s in refs)
        )

    result = RunResult(
        "q?",
        "",
        "linear",
        trace=(hop("hop-1", ("a", 0.2), ("b", 0.5)), hop("hop-2", ("c", 0.9), ("a", 0.7), ("d", 0.1))),
    )
    assert [(r.id, r.score) for r in result.distinct_retrieved()] == [("a", 0.7), ("b", 0.5), ("c", 0.9), ("d", 0.1)]
    assert [r.id for r in best_passages(result, 2)] == ["c", "a"]
    no_text = RunResult(
        "q?", "", "linear", trace=(Step(node="hop-1", kind="retrieve", passages=(PassageRef("e", "E", 1.0),)),)
    )
    assert no_text.distinct_retrieved() == []

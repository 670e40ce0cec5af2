"""A choice question's answer is held to the options it names (nlqo.execution.choice)."""

from __future__ import annotations

import gzip
import json
import time
import pytest

from fakes import PASSAGES, HashEmbedder, KeywordRetriever
from nlqo.config import EngineConfig
from nlqo.execution.choice import CHOICE_NODE, HELD, named_options
from nlqo.parser.questions import offered_options
from nlqo.main.engine import Engine
from nlqo.runtime.llm import ScriptedLLM

QUESTION = "Which film came out first, Jaws or Alien?"


def engine(llm, **options) -> Engine:
    config = EngineConfig(strategy="linear", measure_costs=False, cost_model="structural", **options)
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder())


def template_llm(final: str, again: str) -> ScriptedLLM:
    """A linear run that asks one question, then answers ``final``; asked again, it says ``again``."""
    return ScriptedLLM(
        [
            ("Answer the question from the contexts", again),
            ("Question:$", [" When was the film Jaws released?", f" {QUESTION}"]),
            ("Based on the contexts,$", " Jaws is a 1975 film directed by Steven Spielberg."),
            ("is:$", final),
        ]
    )


class Clock:
    """A stand-in for ``time.perf_counter`` that moves only when told: timings read from it are exact."""

    def __init__(self) -> None:
        self.now = time.perf_counter() + 3600.0  # ahead of any real reading taken before it was installed

    def __call__(self) -> float:
        return self.now


class SlowAgain:
    """``llm``, but the call that asks again among the options takes ``DELAY_MS`` on ``clock``."""

    DELAY_MS = 200

    def __init__(self, llm: ScriptedLLM, clock: Clock) -> None:
        self.llm = llm
        self.calls = llm.calls
        self.clock = clock

    def __getattr__(self, name):
        return getattr(self.llm, name)

    def complete(self, prompt, **options):
        self._wait(prompt)
        return self.llm.complete(prompt, **options)

    def chat(self, messages, **options):
        self._wait("\n".join(m.content for m in messages))
        return self.llm.chat(messages, **options)

    def _wait(self, prompt: str) -> None:
        if "Answer the question from the contexts" in prompt:
            self.clock.now += self.DELAY_MS / 1000


@pytest.mark.parametrize(
    "question, options",
    [
        (
            "Which film was released earlier, Grandi Magazzini or Krudt Og Klunker?",
            ("Grandi Magazzini", "Krudt Og Klunker"),
        ),
        (
            "Which case came first, Craig v. Boren or United States v. Paramount Pictures, Inc.?",
            ("Craig v. Boren", "United States v. Paramount Pictures, Inc."),
        ),
        (
            "Which film has the director who died later, What Will You Do When You Catch Me? or School On Fire?",
            ("What Will You Do When You Catch Me", "School On Fire"),
        ),
        ("Who was born earlier, Simone Bolelli or Caroline Wozniacki?", ("Simone Bolelli", "Caroline Wozniacki")),
        ("In 1990, did Jaws or Alien sell more?", ()),
        ("Are the directors of Jaws and Alien both American?", ("yes", "no")),
        ("Did Jaws or Alien sell more?", ()),
        ("Will Smith starred in which film?", ()),
        ("Which film came out first, Jaws or Alien or Up?", ()),
        ("Who directed Jaws, Spielberg?", ()),
    ],
)
def test_options_are_read_from_the_comma_form_only(question, options):
    assert offered_options(question) == options


def test_an_answer_named_with_both_options_links_neither():
    from nlqo.execution.choice import linked_options

    texts = ["Jaws and Alien were both scored by John Williams? Jaws was; Alien was scored by Jerry Goldsmith."]
    assert linked_options("John Williams", ["Jaws", "Alien"], texts) == ["Jaws", "Alien"]
    assert linked_options("Jerry Goldsmith", ["Jaws", "Alien"], ["Alien: Jerry Goldsmith", "Jaws"]) == ["Alien"]


def test_an_answer_names_an_option_by_its_words_whatever_the_form():
    options = ["Joseph L. Mankiewicz", "Tony Kaye"]
    assert named_options("Joseph Leo Mankiewicz", options) == ["Joseph L. Mankiewicz"]
    assert named_options("Kaye", options) == ["Tony Kaye"]
    assert named_options("1986", options) == [] and named_options("", options) == []
    assert named_options("Tony Kaye and Joseph Mankiewicz", options) == options


def test_every_gold_answer_of_an_option_question_in_the_shared_dev_sets_names_exactly_one_option(shared_data):
    """Why holding an answer to the options cannot turn a right answer wrong on these sets; and every
    yes/no question there is read as polar."""
    asked = polar = 0
    for name in ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200"):
        with gzip.open(shared_data / f"{name}.jsonl.gz", "rt") as lines:
            for question in map(json.loads, lines):
                options = offered_options(question["question"])
                if options:
                    asked += 1
                    assert any(len(named_options(a, options)) == 1 for a in question["answers"]), question
                yes_no = bool({a.lower() for a in question["answers"]} & {"yes", "no"})
                assert yes_no == (options == ("yes", "no")), question
                polar += yes_no
    assert (asked, polar) == (169 + 36, 36)


def test_an_answer_the_runs_text_links_to_one_option_becomes_that_option_without_a_call():
    llm = template_llm(
        " Steven Spielberg", "Alien"
    )  # the evidence: "Jaws is a 1975 film directed by Steven Spielberg."
    result = engine(llm).ask(QUESTION)
    assert result.answer == "Jaws" and result.stop_reason.endswith(f"; {HELD}")
    assert not any("Answer the question from the contexts" in c for c in llm.calls)
    last = result.trace[-1]
    assert (last.node, last.kind, last.text) == (CHOICE_NODE, "stop", "Jaws")
    assert last.note == "the answer 'Steven Spielberg' named no option; the run's own text names it with 'Jaws' only"


def test_an_answer_linked_to_no_option_is_asked_again_among_the_options_over_the_runs_passages(monkeypatch):
    clock = Clock()
    llm = SlowAgain(template_llm(" Ridley Scott", "Jaws"), clock)
    monkeypatch.setattr(time, "perf_counter", clock)  # only the extra call moves it
    result = engine(llm).ask(QUESTION)
    assert result.answer == "Jaws" and result.stop_reason.endswith(f"; {HELD}")
    last = result.trace[-1]
    # the extra call counts as execution, none of it as planning
    assert (result.execution_ms, result.planning_ms) == (pytest.approx(SlowAgain.DELAY_MS), 0.0)
    assert last.node == CHOICE_NODE and "'Ridley Scott' named no option" in last.note and "Jaws | Alien" in last.note
    retrieved = {p.title for s in result.trace if s.kind == "retrieve" for p in s.passages}
    assert retrieved and all(title in llm.calls[-1] for title in retrieved)


def test_an_answer_naming_one_option_costs_no_extra_call():
    llm = template_llm(" Jaws (film)", "Alien")
    result = engine(llm).ask(QUESTION)
    assert result.answer == "Jaws (film)" and HELD not in result.stop_reason
    assert not any("Answer the question from the contexts" in c for c in llm.calls)


def test_a_reply_that_still_names_no_option_leaves_the_answer_and_shows_the_try():
    result = engine(template_llm(" Ridley Scott", "1975")).ask(QUESTION)
    assert result.answer == "Ridley Scott" and HELD not in result.stop_reason
    assert result.trace[-1].node == CHOICE_NODE and result.trace[-1].text == "1975"


def test_a_polar_question_answered_with_a_name_is_asked_again_for_yes_or_no():
    question = "Are Jaws and Alien both American films?"
    llm = ScriptedLLM(
        [
            ("Answer the question from the contexts", "yes"),
            ("Question:$", [" When was the film Jaws released?", f" {question}"]),
            ("Based on the contexts,$", " Jaws is a 1975 film directed by Steven Spielberg."),
            ("is:$", " American"),
        ]
    )
    result = engine(llm).ask(question)
    assert result.answer == "yes" and result.stop_reason.endswith(f"; {HELD}")
    assert "asked again among yes | no" in result.trace[-1].note


def test_holding_to_options_can_be_turned_off():
    llm = template_llm(" Steven Spielberg", "Jaws")
    result = engine(llm, hold_options=False).ask(QUESTION)
    assert result.answer == "Steven Spielberg" and all(s.node != CHOICE_NODE for s in result.trace)

"""Stable rounds (issue 54, item 2): iterate lists the passages a round shares with the round before
first, in that round's order, so its prompt extends the cached prefix; a round that retrieves the
same passages ends the rounds at a fixed point. Off (the default), each round lists its passages by
rank, as iter-retgen does."""

from __future__ import annotations

import pytest

from fakes import PASSAGES, HashEmbedder
from nlqo.common.passages import Hit
from nlqo.config import EngineConfig
from nlqo.main.engine import Engine
from nlqo.runtime.llm import ScriptedLLM

QUESTION = "Where was the director of Jaws born?"
BY_ID = {p.id: p for p in PASSAGES}


class RoundsRetriever:
    """Returns the next of ``rounds`` (passage ids, best first) at each search; the last repeats."""

    def __init__(self, *rounds: str):
        self.rounds, self.queries = [r.split() for r in rounds], []

    def search(self, query: str, k: int = 3) -> list[Hit]:
        ids = self.rounds[min(len(self.queries), len(self.rounds) - 1)]
        self.queries.append(query)
        return [Hit(BY_ID[i], 1.0 / (r + 1), r + 1) for r, i in enumerate(ids[:k])]


def ask(retriever: RoundsRetriever, *, stable: bool, strategy: str = "iterate", replies=("Cincinnati",)):
    llm = ScriptedLLM([("given documents", list(replies))], default=replies[-1])
    config = EngineConfig(cost_model="structural", measure_costs=False, stable_rounds=stable, k=3)
    engine = Engine.from_config(config, llm=llm, retriever=retriever, embedder=HashEmbedder())
    return engine.ask(QUESTION, strategy=strategy), llm


def listed(prompt: str) -> list[str]:
    """The passage ids a standard-rag prompt lists, in order."""
    return [i for _, i in sorted((prompt.index(BY_ID[i].text), i) for i in BY_ID if BY_ID[i].text in prompt)]


def test_a_round_that_retrieves_the_same_passages_ends_the_rounds_with_that_answer():
    retriever = RoundsRetriever("p1 p2 p5", "p2 p1 p5")  # round 2: the same passages, ranked otherwise
    result, llm = ask(retriever, stable=True)
    assert len(llm.calls) == 1 and len(retriever.queries) == 2  # round 2 retrieved, then stopped; no round 3
    assert result.answer == "Cincinnati" and result.stop_reason == "fixed_point" and result.hops == 1
    steps = [(s.node, str(s.kind), s.text) for s in result.trace if s.node == "round-2"]
    assert steps[-1] == ("round-2", "stop", "fixed_point")


def test_without_stable_rounds_every_round_runs_and_lists_its_passages_by_rank():
    retriever = RoundsRetriever("p1 p2 p5", "p2 p1 p5")
    result, llm = ask(retriever, stable=False)
    assert len(llm.calls) == 3 and result.stop_reason == "max_rounds" and result.hops == 3
    assert [listed(c) for c in llm.calls] == [["p1", "p2", "p5"], ["p2", "p1", "p5"], ["p2", "p1", "p5"]]


def test_a_round_lists_the_passages_it_shares_with_the_round_before_first_in_that_rounds_order():
    retriever = RoundsRetriever("p1 p2 p3", "p4 p2 p1", "p5 p4 p1")
    result, llm = ask(retriever, stable=True, replies=("Ohio", "Cincinnati", "Cincinnati"))
    assert [listed(c) for c in llm.calls] == [["p1", "p2", "p3"], ["p1", "p2", "p4"], ["p1", "p4", "p5"]]
    assert result.answer == "Cincinnati" and result.stop_reason == "max_rounds" and result.hops == 3
    first, second = llm.calls[:2]
    shared = first[: first.index("Doc 3")]
    assert second.startswith(shared)  # round 2's prompt extends round 1's up to the passage it dropped


def test_the_cascade_iterates_in_stable_order_and_stops_at_a_fixed_point():
    # retrieve's answer (Tokyo) is in none of its passages, so the cascade, without calibration, iterates
    retriever = RoundsRetriever("p1 p3 p4", "p3 p4 p1", "p5 p2 p1")
    llm = ScriptedLLM([("given documents", "Tokyo"), ("nlqo IR", "unparseable")], default="Tokyo")
    config = EngineConfig(cost_model="structural", measure_costs=False, stable_rounds=True, k=3, repairs=0)
    engine = Engine.from_config(config, llm=llm, retriever=retriever, embedder=HashEmbedder())
    result = engine.ask(QUESTION, strategy="cascade")
    rounds = [(str(s.kind), s.text) for s in result.trace if s.node.startswith("round-")]
    assert rounds[:2] == [("retrieve", QUESTION), ("llm", "Tokyo")]
    assert rounds[2:] == [("retrieve", f"{QUESTION} Tokyo"), ("stop", "fixed_point")]  # round 3 never ran
    assert retriever.queries[:2] == [QUESTION, f"{QUESTION} Tokyo"]


@pytest.mark.parametrize("stable", [True, False])
def test_the_bench_runs_iterate_with_and_without_stable_rounds_side_by_side(stable):
    from nlqo.eval.strategy import build_strategy

    retriever = RoundsRetriever("p1 p2 p5", "p2 p1 p5")
    llm = ScriptedLLM([("given documents", "Cincinnati")])
    config = EngineConfig(cost_model="structural", measure_costs=False)
    name = f"iterate[stable_rounds={'on' if stable else 'off'}]"
    result = build_strategy(name, llm, retriever, embedder=HashEmbedder(), k=3, config=config).run(QUESTION)
    assert (len(llm.calls), result.stop_reason) == ((1, "fixed_point") if stable else (3, "max_rounds"))

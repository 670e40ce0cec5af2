"""RETRIEVE: one retrieval with the question and one answer (the standard-rag baseline's prompt)."""

from __future__ import annotations

import attrs

from nlqo.execute.lower import estimate_retrieve
from nlqo.kinds import Operator
from nlqo.operators.base import at_root


@attrs.frozen
class Retrieve:
    name: Operator = Operator.RETRIEVE
    label: str = "Retrieve (standard RAG)"
    needs_plan: bool = False

    def estimate(self, plan, profile, k):
        return estimate_retrieve(profile, k)

    def run(self, engine, question, physical, trace, strategy):
        from nlqo.strategies.baselines import StandardRag

        return attrs.evolve(
            StandardRag(engine.llm, engine.retriever, k=engine.k).run(question, trace=trace), strategy=strategy
        )

    def annotate(self, physical):
        return at_root(physical, "Retrieve: one retrieval, one answer")


RETRIEVE = Retrieve()

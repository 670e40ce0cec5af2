"""RETRIEVE: one retrieval with the question and one answer (the standard-rag baseline's prompt):
the first of ITERATE's rounds, alone."""

from __future__ import annotations

import time

import attrs

from nlqo.execution.calls import stop
from nlqo.execution.operators.base import at_root
from nlqo.execution.operators.iterate import estimate_rounds, more_rounds, result
from nlqo.kinds import Operator, StopReason


@attrs.frozen
class Retrieve:
    name: Operator = Operator.RETRIEVE
    label: str = "Retrieve (standard RAG)"
    needs_plan: bool = False

    def candidate(self, shape, simple):
        return shape == "single" and simple == Operator.RETRIEVE

    def estimate(self, plan, profile, k):
        return estimate_rounds(profile, k, 1)

    def run(self, context, question, physical, trace, strategy):
        started = time.perf_counter()
        done = more_rounds(context, question, trace, rounds=1)
        return result(question, done, trace, strategy, started, stop(trace, "round-1", StopReason.ANSWER))

    def annotate(self, physical):
        return at_root(physical, "Retrieve: one retrieval, one answer")


RETRIEVE = Retrieve()

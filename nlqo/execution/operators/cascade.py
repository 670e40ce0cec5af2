"""CASCADE: RETRIEVE first; when its answer is not supported by its passages
(:func:`nlqo.execution.operators.support.support`), ITERATE's later rounds continue from it; when that answer
is not supported either, or the rounds disagree, the question is parsed and planned, and the plan's
operator (template or tree, by cost) answers.

No threshold is fitted: the checks are the records' own signals (benchmarks/route_analysis.py at commit 197ff87: an
unsupported answer was right 0-5% of the time, a supported one 9-44%; when iter-retgen's rounds
disagree its exact match fell).
"""

from __future__ import annotations

import time

import attrs

from nlqo.execution.trace import Step, StepKind
from nlqo.kinds import Operator, StopReason, stop_reasons
from nlqo.execution.operators.base import PLANNED, at_root
from nlqo.execution.operators.iterate import ROUNDS, estimate_rounds, more_rounds, result
from nlqo.execution.operators.support import support

NODE = "cascade"
"""Trace label of the cascade's decisions."""


@attrs.frozen
class Cascade:
    name: Operator = Operator.CASCADE
    label: str = "Cascade (retrieve, then iterate, then the plan)"
    needs_plan: bool = False

    def candidate(self, shape, simple):
        return False

    def estimate(self, plan, profile, k):
        return estimate_rounds(profile, k, 1)

    def run(self, context, question, physical, trace, strategy):
        started = time.perf_counter()
        first = more_rounds(context, question, trace, rounds=1)
        verdict = support(first.answers[0], question, passage_texts(trace))
        if verdict.supported:
            decide(trace, f"retrieve's answer: {verdict.reason}; stop")
            return result(question, first, trace, strategy, started, StopReason.CASCADE_RETRIEVE)
        decide(trace, f"retrieve's answer: {verdict.reason}; iterate")
        rounds = more_rounds(context, question, trace, first, rounds=ROUNDS)
        verdict = support(rounds.answers[-1], question, passage_texts(trace))
        agree = len(set(rounds.answers)) == 1
        if verdict.supported and agree:
            decide(trace, f"iterate's answer: {verdict.reason}, rounds agree; stop")
            return result(question, rounds, trace, strategy, started, StopReason.CASCADE_ITERATE)
        why = verdict.reason if not verdict.supported else "the rounds disagree"
        decide(trace, f"iterate's answer: {why}; plan")
        planned = context.plan(question, strategy=PLANNED, trace=trace)
        done = context.run_planned(question, planned, PLANNED, trace)
        total_ms = (time.perf_counter() - started) * 1000
        return attrs.evolve(
            done,
            strategy=strategy,
            stop_reason=stop_reasons(StopReason.CASCADE_PLAN, done.stop_reason),
            execution_ms=total_ms - done.planning_ms,
        )

    def annotate(self, physical):
        return at_root(physical, "Cascade: retrieve; iterate if unsupported; the plan if still unsupported")


def decide(trace, text: str) -> None:
    trace.record(Step(node=NODE, kind=StepKind.STOP, text=text, started_ms=trace.now_ms()))


def passage_texts(trace) -> list[str]:
    """Texts of every passage retrieved so far."""
    return [p.text for s in trace.freeze() if s.kind == StepKind.RETRIEVE for p in s.passages]


CASCADE = Cascade()

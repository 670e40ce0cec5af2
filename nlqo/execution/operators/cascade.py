"""CASCADE: RETRIEVE first, escalated when its answer is doubtful.

**By calibrated confidence**, when the statistics carry a calibration for this setup
(:mod:`nlqo.planner.statistics.calibration`, fitted by ``nlqo analyze`` on its sample) and the
backend reads the model's confidence: retrieve's answer is doubtful when its calibrated feature is
below the fitted threshold or it is not supported by its passages
(:func:`nlqo.execution.operators.support.support`). A doubtful answer escalates to the operator the
statistics favour on such questions: ITERATE continues from retrieve's round; LINEAR and TREE
parse and plan the question first and run forced on the plan, the template showing the plan's atoms
as hints (``plan_escalations``; off, the template runs on the question alone). On hard questions the
other operators fail too, so escalating is not enough: the cascade keeps the answer the calibration trusts more, each
operator's probability of being right from its own feature and signals (supported; for iterate,
whether its rounds agree). An escalated answer trusted less than the first gives way to it.

**By support** otherwise (no calibration, or no confidence read for the first answer): when the
first answer is not supported, ITERATE's later rounds continue from it; when that answer is not
supported either, or the rounds disagree, the question is parsed and planned, and the plan's
operator (template or tree, by cost) answers. Those checks fit nothing (benchmarks/route_analysis.py
at commit 197ff87: an unsupported answer was right 0-5% of the time, a supported one 9-44%; when
iter-retgen's rounds disagree its exact match fell).

Every decision is a ``cascade`` stop step of the trace; with calibration its ``decision`` holds the
numbers (the feature, its value, the threshold, the probabilities, the answer kept and why).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import attrs

from nlqo.execution.trace import RunResult, Step, StepKind, Trace
from nlqo.kinds import Operator, StopReason, stop_reasons
from nlqo.execution.operators.base import PLANNED, Calibrated, at_root
from nlqo.execution.operators.iterate import ROUNDS, Rounds, estimate_rounds, more_rounds, result
from nlqo.execution.operators.support import AGREE, SUPPORTED, YES_NO, support, yes_no_question

NODE = "cascade"
"""Trace label of the cascade's decisions."""


@attrs.frozen
class Cascade:
    name: Operator = Operator.CASCADE
    label: str = "Cascade (retrieve, escalated when doubtful)"
    needs_plan: bool = False

    def candidate(self, shape, simple):
        return False

    def estimate(self, plan, profile, k):
        return estimate_rounds(profile, k, 1)

    def run(self, context, question, physical, trace, strategy):
        started = time.perf_counter()
        first = more_rounds(context, question, trace, rounds=1)
        trust = context.calibration
        if trust is not None:
            answered = result(question, first, trace, strategy, started, StopReason.CASCADE_RETRIEVE)
            value = trust.value(Operator.RETRIEVE, answered.confidence)
            if value is not None:
                return by_confidence(context, question, first, answered, trust, value, trace, strategy, started)
            decide(
                trace,
                "no confidence was read for retrieve's answer: the cascade decides by support",
                {"calibrated": False},
            )
        return by_support(context, question, first, trace, strategy, started)

    def annotate(self, physical):
        return at_root(
            physical, "Cascade: retrieve; escalated when its answer is doubtful (calibrated confidence, else support)"
        )


def by_confidence(
    context,
    question: str,
    first: Rounds,
    answered: RunResult,
    trust: Calibrated,
    value: float,
    trace: Trace,
    strategy: str,
    started: float,
) -> RunResult:
    """Escalate a doubtful first answer to the calibration's target; keep the answer trusted more."""
    retrieve, target = Operator.RETRIEVE.value, str(trust.target)
    verdict = support(answered.answer, question, passage_texts(trace))
    asks_yes_no = yes_no_question(question)
    p_first = trust.probability(retrieve, answered.confidence, {SUPPORTED: verdict.supported, YES_NO: asks_yes_no})
    low = trust.threshold is not None and value < trust.threshold
    numbers: dict[str, Any] = {
        "operator": retrieve,
        "feature": trust.feature,
        "value": value,
        "threshold": trust.threshold,
        "supported": verdict.supported,
        "p_right": p_first,
    }
    seen = f"{_against(trust.feature, value, trust.threshold)}, {verdict.reason}, P(right) {_share(p_first)}"
    if not low and verdict.supported:
        why = "confident and supported"
        decide(trace, f"retrieve's answer: {seen}; stop ({why})", {**numbers, "kept": retrieve, "why": why})
        return attrs.evolve(answered, trace=trace.freeze())
    why = "; ".join(
        w for w in ("confidence below the threshold" if low else "", "" if verdict.supported else verdict.reason) if w
    )
    decide(
        trace,
        f"retrieve's answer: {seen}; escalate to {target} ({why})",
        {**numbers, "escalate_to": target, "why": why},
    )
    mark = len(trace.freeze())
    second, signals = run_target(context, question, first, target, trace, strategy, started)
    texts = passage_texts(trace, since=0 if target == Operator.ITERATE else mark)
    verdict2 = support(second.answer, question, texts)
    signals = {SUPPORTED: verdict2.supported, YES_NO: asks_yes_no, **signals}
    confidence = second.confidence
    value2 = trust.value(target, confidence)
    p_second = trust.probability(target, confidence, signals)
    if not second.answer.strip():
        keep_first, why = True, f"{target} gave no answer"
    elif p_first is None or p_second is None:
        keep_first, why = False, "no calibrated probability to compare: the escalated answer is kept"
    elif p_second < p_first:
        keep_first, why = True, f"{target}'s answer is trusted less ({_share(p_second)} < {_share(p_first)})"
    else:
        keep_first, why = (
            False,
            f"{target}'s answer is trusted at least as much ({_share(p_second)} >= {_share(p_first)})",
        )
    kept = retrieve if keep_first else target
    rounds = "" if AGREE not in signals else (", rounds agree" if signals[AGREE] else ", rounds disagree")
    feature2 = trust.feature_of(target)
    seen2 = f"{_against(feature2, value2, None)}, " if feature2 is not None else ""
    decide(
        trace,
        f"{target}'s answer: {seen2}{verdict2.reason}{rounds}, "
        f"P(right) {_share(p_second)} against retrieve's {_share(p_first)}; keep {kept}'s ({why})",
        {
            "operator": target,
            "feature": feature2,
            "value": value2,
            **signals,
            "p_right": p_second,
            "p_first": p_first,
            "kept": kept,
            "why": why,
        },
    )
    total_ms = (time.perf_counter() - started) * 1000
    planning_ms = second.planning_ms
    if keep_first:
        return attrs.evolve(
            answered,
            trace=trace.freeze(),
            stop_reason=StopReason.CASCADE_KEPT_FIRST,
            planning_ms=planning_ms,
            execution_ms=total_ms - planning_ms,
            escalation=escalation_plan(second),
        )
    return attrs.evolve(
        second,
        strategy=strategy,
        trace=trace.freeze(),
        stop_reason=stop_reasons(StopReason.CASCADE_ESCALATED, second.stop_reason),
        execution_ms=total_ms - planning_ms,
        escalation=escalation_plan(second),
    )


def escalation_plan(second: RunResult):
    """The parsed physical plan the escalation ran on, or None (iterate's rounds, a failed parse)."""
    physical = second.physical
    return physical if physical is not None and physical.parsed else None


def run_target(
    context, question: str, first: Rounds, target: str, trace: Trace, strategy: str, started: float
) -> tuple[RunResult, dict[str, bool]]:
    """Run the escalation's operator, forced, with the signals only it has: iterate continues from
    the first round (its own first round); the template and the tree run on the parsed plan (with
    ``plan_escalations``; ``nlqo analyze`` measured the template on the question alone)."""
    if target == Operator.ITERATE:
        rounds = more_rounds(context, question, trace, first, rounds=ROUNDS, stable=context.config.stable_rounds)
        reason = StopReason.FIXED_POINT if rounds.repeated else StopReason.MAX_ROUNDS
        done = result(question, rounds, trace, strategy, started, reason)
        return done, {AGREE: len(set(rounds.answers)) == 1}
    if context.config.plan_escalations:  # parsed and planned, the operator forced on the plan
        planned = context.plan(question, strategy=target, trace=trace)
    else:
        planned = context.prepare(question, strategy=target, trace=trace)
    return context.run_planned(question, planned, target, trace), {}


def by_support(context, question: str, first: Rounds, trace: Trace, strategy: str, started: float) -> RunResult:
    """The cascade without calibration: iterate when unsupported, the plan when still unsupported or the rounds disagree."""
    verdict = support(first.answers[0], question, passage_texts(trace))
    if verdict.supported:
        decide(trace, f"retrieve's answer: {verdict.reason}; stop")
        return result(question, first, trace, strategy, started, StopReason.CASCADE_RETRIEVE)
    decide(trace, f"retrieve's answer: {verdict.reason}; iterate")
    rounds = more_rounds(context, question, trace, first, rounds=ROUNDS, stable=context.config.stable_rounds)
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
        escalation=escalation_plan(done),
    )


def _share(p: float | None) -> str:
    """A probability as a percentage, or ``unknown``.

    >>> _share(0.4567), _share(None)
    ('45.7%', 'unknown')
    """
    return "unknown" if p is None else f"{p:.1%}"


def _against(feature: str, value: float | None, threshold: float | None) -> str:
    """A feature's value, and where it stands against a threshold.

    >>> _against("answer.-mean_entropy", -0.5, -0.8), _against("reply.mean_logprob", -1.25, -0.8)
    ('answer.-mean_entropy -0.50 >= threshold -0.80', 'reply.mean_logprob -1.25 < threshold -0.80')
    >>> _against("reply.min_logprob", None, None)
    'reply.min_logprob unknown'
    """
    if value is None:
        return f"{feature} unknown"
    if threshold is None:
        return f"{feature} {value:.2f}"
    return f"{feature} {value:.2f} {'<' if value < threshold else '>='} threshold {threshold:.2f}"


def decide(trace, text: str, numbers: Mapping[str, Any] | None = None) -> None:
    trace.record(
        Step(
            node=NODE,
            kind=StepKind.STOP,
            text=text,
            started_ms=trace.now_ms(),
            decision=tuple((numbers or {}).items()),
        )
    )


def passage_texts(trace, *, since: int = 0) -> list[str]:
    """Texts of every passage retrieved so far (from step ``since`` on)."""
    return [p.text for s in trace.freeze()[since:] if s.kind == StepKind.RETRIEVE for p in s.passages]


CASCADE = Cascade()

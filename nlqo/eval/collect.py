"""Statistics from per-question records (``nlqo analyze`` writes them with the bench's runner), with
the calibration of the model's confidence fitted on the same records (:func:`calibrate`).

>>> records = [{"qid": str(i), "strategy": "retrieve", "question": "Who wrote it?", "answer": "Tolkien",
...             "em": float(i < 2), "f1": 0.5, "seconds": 8.0, "prompt_tokens": 500, "generated_tokens": 4,
...             "llm_calls": 1, "trace": []} for i in range(4)]
>>> stats = collect(records, measured_on={"model": "m", "k": 3})
>>> s = stats.operators["retrieve"]["all"]
>>> s.n, s.em, round(s.em_low, 2), s.seconds
(4, 0.5, 0.15, 8.0)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping

import attrs

from nlqo.execution.answers import short_answer
from nlqo.execution.operators.support import AGREE, SUPPORTED, YES_NO, support, yes_no_question
from nlqo.kinds import Operator
from nlqo.parser.questions import question_class
from nlqo.planner.statistics.calibration import Calibration, Row, fit
from nlqo.planner.statistics.intervals import wilson
from nlqo.planner.statistics.store import ALL, OperatorStats, Statistics
from nlqo.runtime.llm.confidence import Confidence

BENCH_NAMES = {"standard-rag": "retrieve", "iter-retgen": "iterate"}
"""Bench strategies whose records measure an operator of the engine under another name (same
prompts and calls: :mod:`nlqo.execution.operators.retrieve`, :mod:`nlqo.execution.operators.iterate`)."""


def passage_ids(record: Mapping[str, Any]) -> list[str]:
    return [p["id"] for s in record.get("trace") or [] if s.get("kind") == "retrieve" for p in s.get("passages") or []]


def summarize(rows: list[Mapping[str, Any]], texts: Callable[[str], str] | None) -> OperatorStats:
    n = len(rows)
    hits = sum(r["em"] for r in rows)
    low, high = wilson(hits, n)

    def mean(key: str) -> float:
        return sum(float(r.get(key) or 0.0) for r in rows) / n if n else 0.0

    supported = 0.0
    if texts is not None and n:
        supported = (
            sum(support(r["answer"], r["question"], [texts(i) for i in passage_ids(r)]).supported for r in rows) / n
        )
    return OperatorStats(
        n=n, em=hits / n if n else 0.0, em_low=low, em_high=high, f1=mean("f1"), supported=supported,
        seconds=mean("seconds"), prompt_tokens=mean("prompt_tokens"), generated_tokens=mean("generated_tokens"), llm_calls=mean("llm_calls"),
    )  # fmt: skip


def collect(
    records: Iterable[Mapping[str, Any]],
    *,
    measured_on: Mapping[str, Any],
    sample: Mapping[str, Any] | None = None,
    source: str = "nlqo analyze",
    texts: Callable[[str], str] | None = None,
    prefill_ms_per_token: float | None = None,
) -> Statistics:
    """Per operator and question class: EM with its Wilson interval, F1, supported-answer rate
    (given ``texts``, a passage id's text), seconds, tokens and LLM calls; and the calibration of
    the records' confidence (:func:`calibrate`). Records with an error count as wrong answers, as
    in the bench."""
    records = list(records)
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        op = operator_name(r)
        groups[op][ALL].append(r)
        groups[op][str(question_class(r["question"]))].append(r)
    operators = {
        op: {c: summarize(rows, texts) for c, rows in sorted(classes.items())} for op, classes in sorted(groups.items())
    }
    return Statistics(
        measured_on=dict(measured_on),
        operators=operators,
        sample=dict(sample or {}),
        source=source,
        prefill_ms_per_token=prefill_ms_per_token,
        calibration=calibrate(records, texts),
    )


def rounds_agree(record: Mapping[str, Any]) -> bool | None:
    """Whether an iterate record's rounds gave the same answer (None for a record of no rounds).

    >>> step = lambda r, text: {"kind": "llm", "node": f"round-{r}", "text": text}
    >>> rounds_agree({"question": "Who?", "trace": [step(1, "Rush."), step(2, "Rush")]})
    True
    >>> rounds_agree({"question": "Who?", "trace": [step(1, "Rush"), step(2, "Yes")]}), rounds_agree({"trace": []})
    (False, None)
    """
    answers = [
        short_answer(s.get("text") or "", record.get("question", ""))
        for s in record.get("trace") or []
        if s.get("kind") == "llm" and str(s.get("node", "")).startswith("round-")
    ]
    return len(set(answers)) == 1 if answers else None


def calibration_row(record: Mapping[str, Any], texts: Callable[[str], str] | None) -> Row:
    """What calibration reads of one record: its question, class, EM, seconds, confidence and signals
    (supported, given ``texts``; for iterate, whether its rounds agree)."""
    signals: dict[str, bool] = {YES_NO: yes_no_question(record["question"])}
    if texts is not None:
        signals[SUPPORTED] = support(
            record["answer"], record["question"], [texts(i) for i in passage_ids(record)]
        ).supported
    if operator_name(record) == Operator.ITERATE and (agree := rounds_agree(record)) is not None:
        signals[AGREE] = agree
    confidence = record.get("confidence")
    return Row(
        key=f"{record['qid']}\n{record['question']}",
        question_class=str(question_class(record["question"])),
        em=float(record["em"]),
        seconds=float(record.get("seconds") or 0.0),
        confidence=None if not confidence else Confidence.from_dict(confidence),
        signals=signals,
        answered=bool(str(record.get("answer") or "").strip()),
        planning_seconds=float(record.get("planning_ms") or 0.0) / 1000,
    )


def operator_name(record: Mapping[str, Any]) -> str:
    """The operator a record measures (a bench strategy's own name, or the operator it stands for)."""
    return BENCH_NAMES.get(record["strategy"], record["strategy"])


def calibrate(records: Iterable[Mapping[str, Any]], texts: Callable[[str], str] | None = None) -> Calibration | None:
    """The calibration of the records' confidence (:mod:`nlqo.planner.statistics.calibration`): per
    operator the AUROC of each feature and signal with its interval, the mapping to P(right), the
    escalation table and the cascade plan; None when no record carries a confidence (records of a
    backend that reads none, or written before issue 50).

    This is what refits the calibration from existing records: ``nlqo analyze --refit`` calls it
    through :func:`collect`; for other statistics, ``refit(load(path), records, texts)`` then ``save``.

    >>> from nlqo.runtime.llm.scripted import word_confidence
    >>> records = [{"qid": str(i), "strategy": "standard-rag", "question": "Who wrote it?", "answer": "Tolkien",
    ...             "em": float(i % 3 == 0), "seconds": 8.0, "trace": [],
    ...             "confidence": word_confidence("Tolkien", logprob=-1.0 + 0.4 * (i % 3 == 0)).to_dict()}
    ...            for i in range(30)]
    >>> cal = calibrate(records)
    >>> r = cal.operators["retrieve"]
    >>> r.n, r.features["answer.mean_logprob"].auroc, r.best, cal.n
    (30, 1.0, 'answer.mean_logprob', 30)
    >>> calibrate([{**r, "confidence": None} for r in records]) is None
    True
    """
    rows: dict[str, list[Row]] = defaultdict(list)
    for record in records:
        rows[operator_name(record)].append(calibration_row(record, texts))
    if not any(row.confidence is not None for rs in rows.values() for row in rs):
        return None
    return fit(rows)


def refit(
    stats: Statistics, records: Iterable[Mapping[str, Any]], texts: Callable[[str], str] | None = None
) -> Statistics:
    """``stats`` with their calibration fitted anew on ``records`` (the sample they were measured on)."""
    return attrs.evolve(stats, calibration=calibrate(records, texts))

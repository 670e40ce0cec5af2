"""Statistics from per-question records (``nlqo analyze`` writes them with the bench's runner).

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

from nlqo.execution.operators.support import support
from nlqo.parser.questions import question_class
from nlqo.planner.statistics.intervals import wilson
from nlqo.planner.statistics.store import ALL, OperatorStats, Statistics

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
    (given ``texts``, a passage id's text), seconds, tokens and LLM calls. Records with an error
    count as wrong answers, as in the bench."""
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        op = BENCH_NAMES.get(r["strategy"], r["strategy"])
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
    )

"""Per-question records: one JSON object a line in ``records.jsonl``, appended as a run goes.

A record holds the prediction, its scores, its cost, its plan with per-node actuals (planned
strategies) and its whole trace (without prompts and passage texts). Reading drops a torn
last line (a run killed mid-write) and cuts it off the file, so appending can resume.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from nlqo.errors import ConfigError
from nlqo.eval.datasets import Question
from nlqo.eval.leaks import demo_leak, passage_texts
from nlqo.eval.metrics import evidence_recall, score
from nlqo.execute.trace import RunResult

FILENAME = "records.jsonl"


def retrieved_titles(result: RunResult) -> list[str]:
    """Titles of every passage the run retrieved, in order, without repeats."""
    seen: dict[str, None] = {}
    for ref in result.retrieved:
        seen.setdefault(ref.title, None)
    return list(seen)


def make_record(
    question: Question,
    index: int,
    strategy: str,
    result: RunResult | None,
    seconds: float,
    *,
    yes_no_question: bool = False,
    judge: bool | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """The record of one strategy on one question; ``result`` is None when the run failed with ``error``."""
    answer = result.answer if result is not None else ""
    scores = score(answer, question.answers, yes_no_question=yes_no_question)
    stats = result.stats() if result is not None else {}
    titles = retrieved_titles(result) if result is not None else []
    recall = evidence_recall(titles, question.supporting_titles)
    return {
        "qid": question.id,
        "index": index,
        "strategy": strategy,
        "question": question.question,
        "answer": answer,
        "answers": list(question.answers),
        "demo_leak": demo_leak(answer, passage_texts(result)) if result is not None else None,
        "em": scores.em,
        "f1": scores.f1,
        "acc": scores.acc,
        "judge": judge,
        "seconds": seconds,
        "planning_ms": stats.get("planning_ms", 0.0),
        "execution_ms": stats.get("execution_ms", 0.0),
        "llm_calls": stats.get("llm_calls", 0),
        "prompt_tokens": stats.get("prompt_tokens", 0),
        "cached_prompt_tokens": stats.get("cached_prompt_tokens", 0),
        "generated_tokens": stats.get("generated_tokens", 0),
        "forced_tokens": stats.get("forced_tokens", 0),
        "retrievals": stats.get("retrievals", 0),
        "hops": stats.get("hops", 0),
        "stop_reason": stats.get("stop_reason", "error" if error else ""),
        "operator": result.physical.operator if result is not None and result.physical is not None else None,
        "plan_tree": result.plan_tree() if result is not None else None,
        "evidence_complete": None if recall is None else recall.complete,
        "evidence_share": None if recall is None else recall.share,
        "retrieved_titles": titles,
        "supporting": [{"id": p.id, "title": p.title} for p in (result.supporting if result is not None else ())],
        "error": error,
        "plan": _plan(result),
        "trace": [s.to_dict() for s in result.trace] if result is not None else [],
    }


def _plan(result: RunResult | None) -> dict[str, Any] | None:
    """The plan a run executed, with per-node actuals (EXPLAIN ANALYZE JSON without the trace,
    which the record holds itself); None for a run without a plan."""
    from nlqo.execute import analyze
    from nlqo.execute.lower import PhysicalPlan

    if result is None or not isinstance(result.physical, PhysicalPlan):
        return None
    return analyze.to_dict(result, result.physical, trace=False)


def operator_of(record: dict[str, Any]) -> str | None:
    """The physical operator a planned run was lowered to ('linear' or 'tree'); None when the run
    had no plan (a baseline, the linear strategy, a question that did not parse).

    Records written before the field existed are read from their stop reason and planning time.

    >>> operator_of({"operator": "tree"}), operator_of({"stop_reason": "root_answered"})
    ('tree', 'tree')
    >>> operator_of({"stop_reason": "terminator", "planning_ms": 900.0}), operator_of({"stop_reason": "terminator", "planning_ms": 0.0})
    ('linear', None)
    """
    if "operator" in record:
        return record["operator"]
    reason = str(record.get("stop_reason", ""))
    if reason == "root_answered":
        return "tree"
    if reason in ("terminator", "max_hops", "empty_question") and record.get("planning_ms", 0.0) > 0:
        return "linear"
    return None


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records as JSON lines and flush, so a killed run keeps every finished record."""
    with open(path, "a", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_records(path: Path, *, repair: bool = True) -> list[dict[str, Any]]:
    """Every complete record in ``path`` ([] when absent); a torn last line is cut off the file
    (left alone with ``repair=False``, for readers while a run may still be writing)."""
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if repair and end < len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
    records = []
    for line_no, line in enumerate(data[:end].decode("utf-8").splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{line_no}: not a JSON record ({exc}); remove the line or start a new --out") from exc
    return records

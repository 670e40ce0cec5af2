"""Per-question records: one JSON object a line in ``records.jsonl``, appended as a run goes.

A record holds the prediction, its scores, the model's confidence in it (``confidence``: that of
the generation the answer came from, its ``answer`` part over the answer's own tokens; null when
the backend reads none), its cost, its plan with per-node actuals (planned strategies) and its
whole trace (without prompts and passage texts; each LLM step with its reply's confidence). Reading drops a torn
last line (a run killed mid-write) and cuts it off the file, so appending can resume; a bad
line elsewhere is an error naming its line.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

from nlqo.errors import ConfigError, RepairWarning
from nlqo.eval.datasets import Question
from nlqo.eval.leaks import demo_leak, passage_texts
from nlqo.eval.metrics import evidence_recall, score
from nlqo.execution.trace import RunResult, confidence_dict
from nlqo.kinds import Operator, StopReason
from nlqo.common.storage import writing

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
        "confidence": confidence_dict(result.confidence) if result is not None else None,
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
        "stop_reason": stats.get("stop_reason", StopReason.ERROR if error else ""),
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
    from nlqo.explain import analyze
    from nlqo.execution.physical import PhysicalPlan

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
    if reason == StopReason.ROOT_ANSWERED:
        return Operator.TREE.value
    if (
        reason in (StopReason.TERMINATOR, StopReason.MAX_HOPS, StopReason.EMPTY_QUESTION)
        and record.get("planning_ms", 0.0) > 0
    ):
        return Operator.LINEAR.value
    return None


def append_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Append records as JSON lines and fsync, so a killed run keeps every finished record.

    A write that fails (a full disk) cuts the file back to its complete records and raises
    ``WriteError``.
    """
    data = memoryview("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8"))
    with writing(path, "every record finished before is kept"), open(path, "ab", buffering=0) as fh:
        start = fh.seek(0, os.SEEK_END)
        try:
            while data:
                data = data[fh.write(data) :]
            os.fsync(fh.fileno())
        except OSError:
            fh.truncate(start)  # no torn line: a resumed run appends after whole records
            raise


def read_records(path: Path, *, repair: bool = True, required: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every complete record in ``path`` ([] when absent), each a JSON object with the ``required`` keys.

    A torn last line (a run killed while writing it) is cut off the file with a ``RepairWarning``,
    so its run goes again (left alone with ``repair=False``, for readers while a run may still be
    writing). Any other bad line is a ``ConfigError`` that names it.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if repair and end < len(data):
        with writing(path, "the file is unchanged"):
            with open(path, "r+b") as fh:
                fh.truncate(end)
        torn = data.count(b"\n", 0, end) + 1
        warnings.warn(
            f"{path}:{torn}: dropped a torn last record ({len(data) - end} bytes, left by a run killed while writing it); its run goes again",
            RepairWarning,
            stacklevel=2,
        )
    lines = enumerate(data[:end].split(b"\n")[:-1], start=1)
    return [_parse(text, path, line_no, required) for line_no, text in lines if text.strip()]


def _parse(line: bytes, path: Path, line_no: int, required: Sequence[str]) -> dict[str, Any]:
    fix = f"delete line {line_no} (a run it held goes again when you resume) or use another --out folder"
    try:
        record = json.loads(line)
    except ValueError as exc:  # JSONDecodeError or UnicodeDecodeError
        raise ConfigError(f"{path}:{line_no}: not a JSON record ({exc}); {fix}") from exc
    if not isinstance(record, dict):
        raise ConfigError(f"{path}:{line_no}: a JSON {type(record).__name__}, not a record object; {fix}")
    missing = [key for key in required if key not in record]
    if missing:
        raise ConfigError(f"{path}:{line_no}: record without {', '.join(map(repr, missing))}; {fix}")
    return record

"""Aggregate per-question records into a summary and a Markdown table.

Only questions that every strategy has finished count, so all strategies are compared on the
same questions; EM differences get paired bootstrap 95% intervals.
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from nlqo.eval.datasets import Question, QuestionSet
from nlqo.eval.metrics import bootstrap_diff, stray_yes_no
from nlqo.eval.records import operator_of
from nlqo.execution.trace import PARSE_FAILED

MEANS = (
    "em", "f1", "acc", "seconds", "llm_calls", "prompt_tokens", "cached_prompt_tokens",
    "generated_tokens", "retrievals", "hops",
)  # fmt: skip
"""Record fields averaged per strategy."""


def complete_rows(
    records: Iterable[dict[str, Any]], questions: QuestionSet, names: Sequence[str]
) -> dict[str, list[dict[str, Any]]]:
    """Records per strategy over the questions every strategy has finished, in question order."""
    by_key = {(r["qid"], r["strategy"]): r for r in records}
    done = [q.id for q in questions.questions if all((q.id, n) in by_key for n in names)]
    return {n: [by_key[(qid, n)] for qid in done] for n in names}


def question_kind(question: Question) -> str:
    """The group a question is reported in: ``yes/no`` when its gold answer is, MuSiQue's hop count
    (``3hop1`` -> ``3 hops``), else the data set's own type (bridge, comparison, ...).

    >>> [question_kind(Question("1", "?", ("no",), type="comparison")), question_kind(Question("2", "?", ("x",), type="4hop2")),
    ...  question_kind(Question("3", "?", ("x",), type="bridge")), question_kind(Question("4", "?", ("x",)))]
    ['yes/no', '4 hops', 'bridge', 'untyped']
    """
    if question.is_yes_no:
        return "yes/no"
    if m := re.fullmatch(r"(\d)hop\d*", question.type):
        return f"{m.group(1)} hops"
    return question.type or "untyped"


def by_kind(rows: Mapping[str, Sequence[dict[str, Any]]], questions: QuestionSet) -> dict[str, dict[str, Any]]:
    """EM per strategy within each kind of question (:func:`question_kind`), kinds by size."""
    kinds = {q.id: question_kind(q) for q in questions.questions}
    groups: dict[str, dict[str, list[float]]] = {}
    for name, records in rows.items():
        for r in records:
            groups.setdefault(kinds.get(r["qid"], "untyped"), {}).setdefault(name, []).append(float(r["em"]))
    ordered = sorted(groups.items(), key=lambda kv: (-len(next(iter(kv[1].values()))), kv[0]))
    return {
        kind: {"n": len(next(iter(ems.values()))), "em": {n: statistics.fmean(v) for n, v in ems.items()}}
        for kind, ems in ordered
    }


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def strategy_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means and counts of one strategy's records.

    >>> s = strategy_summary([{"em": 1.0, "hops": 2, "stop_reason": "answer", "evidence_complete": True},
    ...                       {"em": 0.0, "hops": 3, "stop_reason": "parse_failed; terminator", "evidence_complete": None,
    ...                        "answer": "yes", "answers": ["Jaws"]}])
    >>> s["em"], s["hops_histogram"], s["evidence_complete"], s["n"], s["parse_failed"], s["stray_yes_no"]
    (0.5, {'2': 1, '3': 1}, 1.0, 2, 1, 1)
    """
    out: dict[str, Any] = {"n": len(rows)}
    for field in MEANS:
        out[field] = _mean(r.get(field) for r in rows)
    out["computed_prompt_tokens"] = _mean(r.get("prompt_tokens", 0) - r.get("cached_prompt_tokens", 0) for r in rows)
    out["planning_s"] = _mean(r.get("planning_ms", 0.0) / 1000 for r in rows)
    out["execution_s"] = _mean(r.get("execution_ms", 0.0) / 1000 for r in rows)
    out["judge_acc"] = _mean(None if r.get("judge") is None else float(r["judge"]) for r in rows)
    out["evidence_complete"] = _mean(
        None if r.get("evidence_complete") is None else float(r["evidence_complete"]) for r in rows
    )
    out["evidence_share"] = _mean(r.get("evidence_share") for r in rows)
    hops = Counter(int(r.get("hops", 0)) for r in rows)
    out["hops_histogram"] = {str(h): hops[h] for h in sorted(hops)}
    out["stop_reasons"] = dict(sorted(Counter(r.get("stop_reason", "") for r in rows).items()))
    out["errors"] = sum(1 for r in rows if r.get("error"))
    out["parse_failed"] = sum(1 for r in rows if _unparsed(r))
    out["stray_yes_no"] = sum(1 for r in rows if stray_yes_no(r.get("answer", ""), r.get("answers", ())))
    checked = any("demo_leak" in r for r in rows)  # records from before the check have no field
    out["demo_leaks"] = sum(1 for r in rows if r.get("demo_leak")) if checked else None
    out["by_plan"] = plan_outcomes(rows)
    return out


def _unparsed(record: dict[str, Any]) -> bool:
    return str(record.get("stop_reason", "")).startswith(PARSE_FAILED)


def _plan_key(record: dict[str, Any]) -> str | None:
    """What a planning strategy ran for a record: an operator, ``parse_failed``, or None (no planning)."""
    return operator_of(record) or (PARSE_FAILED if _unparsed(record) else None)


def _plan_groups(rows: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    """Positions of ``rows`` by plan key, operators alphabetically, ``parse_failed`` last."""
    groups: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        key = _plan_key(r)
        if key is not None:
            groups.setdefault(key, []).append(i)
    order = sorted(k for k in groups if k != PARSE_FAILED) + ([PARSE_FAILED] if PARSE_FAILED in groups else [])
    return {k: groups[k] for k in order}


def plan_outcomes(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Questions and EM by what a planning strategy ran: the operator its plan was lowered to, or
    ``parse_failed`` (the linear template without a plan); empty for strategies that do not plan.

    >>> plan_outcomes([{"em": 1.0, "operator": "tree"}, {"em": 0.0, "operator": "tree"},
    ...                {"em": 0.0, "operator": None, "stop_reason": "parse_failed; terminator"}, {"em": 1.0, "operator": None}])
    {'tree': {'n': 2, 'em': 0.5}, 'parse_failed': {'n': 1, 'em': 0.0}}
    """
    return {
        k: {"n": len(ix), "em": statistics.fmean(float(rows[i].get("em", 0.0)) for i in ix)}
        for k, ix in _plan_groups(rows).items()
    }


def paired_plan_groups(rows: Mapping[str, Sequence[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """For each planning strategy, its questions grouped by what it ran, with every strategy's EM on
    those same questions (``rows`` as ``complete_rows`` gives them: one list per strategy, aligned).

    Comparing strategies within a group is paired; comparing one strategy across groups is not
    (questions that parse may be easier).

    >>> rows = {"linear": [{"em": 1.0}, {"em": 0.0}, {"em": 1.0}],
    ...         "tree": [{"em": 1.0, "operator": "tree"}, {"em": 1.0, "operator": "tree"}, {"em": 0.0, "stop_reason": "parse_failed; terminator"}]}
    >>> paired_plan_groups(rows)["tree"]
    {'tree': {'n': 2, 'em': {'linear': 0.5, 'tree': 1.0}}, 'parse_failed': {'n': 1, 'em': {'linear': 1.0, 'tree': 0.0}}}
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for planner, own in rows.items():
        groups = _plan_groups(own)
        if groups:
            out[planner] = {
                k: {
                    "n": len(ix),
                    "em": {name: statistics.fmean(float(rows[name][i].get("em", 0.0)) for i in ix) for name in rows},
                }
                for k, ix in groups.items()
            }
    return out


def summarize(
    records: Iterable[dict[str, Any]],
    questions: QuestionSet,
    names: Sequence[str],
    *,
    seed: int = 0,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a run: per-strategy results and pairwise EM differences."""
    rows = complete_rows(records, questions, names)
    n = len(next(iter(rows.values()), []))
    diffs = []
    for a, b in itertools.combinations(names, 2):
        interval = bootstrap_diff([r["em"] for r in rows[a]], [r["em"] for r in rows[b]], seed=seed)
        diffs.append({"a": a, "b": b, "diff": interval.mean, "low": interval.low, "high": interval.high})
    return {
        "dataset": questions.name,
        "kind": questions.kind,
        "questions": len(questions),
        "n": n,
        "pending": len(questions) - n,
        "strategies": list(names),
        "seed": seed,
        "results": {name: strategy_summary(rows[name]) for name in names},
        "em_differences": diffs,
        "plan_groups": paired_plan_groups(rows),
        "by_kind": by_kind(rows, questions),
        "meta": dict(meta or {}),
    }


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1.

    >>> counted(1, "question"), counted(14, "question")
    ('1 question', '14 questions')
    """
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table of ``head`` and ``rows`` (each a row's cells), without a final newline."""
    lines = ["| " + " | ".join(cells) + " |" for cells in (head, *rows)]
    return "\n".join([lines[0], "|" + "---|" * len(head), *lines[1:]])


def markdown_table(summary: dict[str, Any]) -> str:
    """The results table of a summary (percentages for EM, F1, Acc, judge and evidence recall)."""
    head = (
        "| strategy | EM | F1 | Acc | judge | s/question (plan + exec) | LLM calls | generated tokens "
        "| prompt tokens computed / cached | hops | all gold retrieved | gold retrieved | parse failed | errors |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for name in summary["strategies"]:
        r = summary["results"][name]
        seconds = f"{_num(r['seconds'], 2)} ({_num(r['planning_s'], 2)} + {_num(r['execution_s'], 2)})"
        lines.append(
            f"| {name} | {_pct(r['em'])} | {_pct(r['f1'])} | {_pct(r['acc'])} | {_pct(r['judge_acc'])} | {seconds} "
            f"| {_num(r['llm_calls'])} | {_num(r['generated_tokens'])} "
            f"| {_num(r['computed_prompt_tokens'], 0)} / {_num(r['cached_prompt_tokens'], 0)} | {_num(r['hops'])} "
            f"| {_pct(r['evidence_complete'])} | {_pct(r['evidence_share'])} | {r.get('parse_failed', '-')} | {r['errors']} |"
        )
    return "\n".join(lines) + "\n"


def kinds_table(summary: dict[str, Any]) -> str:
    """EM per strategy for each kind of question ("" when the run has one kind or none recorded).

    >>> print(kinds_table({"strategies": ["a", "b"], "by_kind": {"bridge": {"n": 3, "em": {"a": 1 / 3, "b": 1.0}},
    ...                                                          "yes/no": {"n": 1, "em": {"a": 0.0, "b": 1.0}}}}))
    | question kind | n | a | b |
    |---|---|---|---|
    | bridge | 3 | 33.3 | 100.0 |
    | yes/no | 1 | 0.0 | 100.0 |
    <BLANKLINE>
    """
    kinds = summary.get("by_kind") or {}
    if len(kinds) < 2:
        return ""
    names = summary["strategies"]
    rows = [[kind, str(group["n"]), *(_pct(group["em"].get(n)) for n in names)] for kind, group in kinds.items()]
    return table(["question kind", "n", *names], rows) + "\n"


def differences_table(summary: dict[str, Any], *, against: str | None = None) -> str:
    """EM differences in points with their 95% intervals; only pairs with ``against`` when given."""
    rows: list[list[str]] = []
    for d in summary["em_differences"]:
        a, b, diff, low, high = d["a"], d["b"], d["diff"], d["low"], d["high"]
        if against is not None and against not in (a, b):
            continue
        if against is not None and b == against:
            a, b, diff, low, high = b, a, 0.0 - diff, 0.0 - high, 0.0 - low  # 0.0 - x: no -0.0
        rows.append([f"{a} - {b}", f"{100 * diff:+.1f}", f"[{100 * low:+.1f}, {100 * high:+.1f}]"])
    return table(["A - B", "EM difference (points)", "95% interval"], rows) + "\n"


def _cell(text: str, width: int = 60) -> str:
    r"""Text fit for one Markdown table cell.

    >>> _cell("a | b\nc"), _cell("x" * 70, 8)
    ('a \\| b c', 'xxxxxxx…')
    """
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def answers_table(rows: dict[str, list[dict[str, Any]]], links: Mapping[tuple[str, str], str] | None = None) -> str:
    """Every finished question with its gold answer and each strategy's answer (✓ when EM is 1),
    followed by a link to its plan page when ``links`` has one for (question id, strategy)."""
    names = list(rows)
    links = links or {}
    lines: list[list[str]] = []
    for by_question in zip(*rows.values()):
        first = by_question[0]
        answers = [
            ("✓ " if r["em"] == 1 else "")
            + _cell(r["answer"], 40)
            + (f" [plan]({links[r['qid'], r['strategy']]})" if (r["qid"], r["strategy"]) in links else "")
            for r in by_question
        ]
        gold = _cell(" / ".join(first["answers"]), 40)
        lines.append([str(first["index"] + 1), _cell(first["question"], 160), gold, *answers])
    return table(["#", "question", "gold", *names], lines) + "\n"

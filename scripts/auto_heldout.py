"""Issue 50's out-of-the-box check: `auto` with the bundled statistics on each set's held-back questions.

Reads `make auto-heldout`'s records (benchmarks/results/auto-heldout/SET: auto and iter-retgen in one
run, interleaved, and standard-rag where the benchmark of record has none) and, for standard-rag on
the other sets, the benchmark of record's answers to the same questions (benchmarks/results/runs).
Runs no model. Writes five blocks of docs/statistics.md:

- `auto-heldout`: per set, EM with Wilson intervals, auto minus the better of standard-rag and
  iter-retgen with a paired bootstrap interval, auto's seconds over iter-retgen's in the same run,
  what auto ran (how many escalated, how many were parsed and planned);
- `auto-heldout-routes`: the same questions by the route auto took (question class, operator,
  escalated or not), each route's right answers beside iter-retgen's and standard-rag's;
- `auto-heldout-escalations`: the escalated questions of the first run (questions 50-99, the template
  on the question alone, kept in SET/escalations-unplanned.jsonl) against the same questions run
  again with the escalation parsed and planned (`plan_escalations`, the default since 7f360a0);
  every other question's answer is the same in both (the cascade decides before it escalates);
- `auto-heldout-earlier-bundle`: the yes-no questions, which the bundle sent to the cascade until
  StrategyQA joined it (8bce467) and to the template since: their earlier records (kept in
  SET/yes-no-earlier-bundle.jsonl) against the same questions run again;
- `auto-heldout-auroc`: the AUROC of each confidence feature, and of the bundled calibration's
  P(right) (its best feature with the support signal, fitted on the first 50 questions of each
  set), for retrieve's, iterate's and the template's answers on the held-back questions (the
  template's: the questions auto sent to it, choice ones and, since 8bce467, yes-no ones). Retrieve's answers are the
  in-run standard-rag's where there is one, else the cascade's first round inside auto's records
  (questions auto sent to the cascade: not the choice and yes-no ones, which go to the template); a
  first round the cascade escalated carries its reply's confidence only, so its `answer.*`
  features are the reply's.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from pathlib import Path

from confidence import texts_of  # scripts/confidence.py, beside this script
from nlqo.common.docblocks import write_block
from nlqo.eval.collect import calibration_row, operator_name
from nlqo.eval.datasets import Question
from nlqo.eval.metrics import bootstrap_diff, score, wilson_interval
from nlqo.eval.records import operator_of, read_records
from nlqo.execution.answers import short_answer
from nlqo.execution.operators.support import SUPPORTED
from nlqo.kinds import escalated
from nlqo.planner.statistics.calibration import FEATURES, auroc, auroc_interval, feature
from nlqo.planner.statistics.store import BUNDLED, load

HELDOUT = Path("benchmarks/results/auto-heldout")
RECORD = Path("benchmarks/results/runs")
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200", "strategyqa_229")
P_RIGHT = "P(right)"
OPERATOR_RECORDS = {"retrieve": "standard-rag", "iterate": "iter-retgen", "linear": "linear"}
"""Each operator of the AUROC table and the bench strategy its records stand for."""
SEED = 20261207
EARLIER_BUNDLE = "yes-no-earlier-bundle.jsonl"
"""auto's records of the yes-no questions made with the bundle before StrategyQA joined it (8bce467:
they went to the cascade, now to the template), taken out of records.jsonl and run again."""


def by_strategy(path: Path) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = defaultdict(dict)
    if path.is_file():
        for r in read_records(path, repair=False):
            out[r["strategy"]][r["qid"]] = r
    return out


def first_round(auto: dict) -> dict | None:
    """Retrieve's answer inside an auto record that ran the cascade, as a standard-rag record."""
    steps = auto.get("trace") or []
    round1 = [s for s in steps if s.get("node") == "round-1"]
    llm = [s for s in round1 if s.get("kind") == "llm"]
    if operator_of(auto) != "cascade" or not llm:
        return None
    answer = short_answer(llm[0].get("text") or "", auto["question"])
    kept_first = not any(s.get("node") != "round-1" and s.get("kind") == "llm" for s in steps)
    confidence = auto["confidence"] if kept_first else llm[0].get("confidence")
    yes_no = Question(auto["qid"], auto["question"], tuple(auto["answers"])).is_yes_no
    em = score(answer, auto["answers"], yes_no_question=yes_no).em
    return {**auto, "strategy": "standard-rag", "answer": answer, "em": em, "confidence": confidence, "trace": round1}


def planned(record: dict) -> bool:
    """Whether the question was parsed (and so planned) on the way to its answer."""
    return any(s.get("node") == "parse" or s.get("kind") == "parse" for s in record.get("trace") or [])


def measure(dataset: str) -> dict | None:
    run = by_strategy(HELDOUT / dataset / "records.jsonl")
    if not run.get("auto"):
        return None
    standard = run.get("standard-rag") or by_strategy(RECORD / dataset / "records.jsonl").get("standard-rag", {})
    qids = sorted(
        (q for q in run["auto"] if q in run.get("iter-retgen", {}) and q in standard),
        key=lambda q: run["auto"][q]["index"],
    )
    auto = [run["auto"][q] for q in qids]
    rows = {
        "auto": auto,
        "standard-rag": [standard[q] for q in qids],
        "iter-retgen": [run["iter-retgen"][q] for q in qids],
    }
    em = {k: sum(r["em"] for r in v) for k, v in rows.items()}
    better = max(("standard-rag", "iter-retgen"), key=lambda k: em[k])
    gain = bootstrap_diff([r["em"] for r in auto], [r["em"] for r in rows[better]], resamples=10000, seed=SEED)
    seconds = {k: sum(r["seconds"] for r in v) / max(len(v), 1) for k, v in rows.items()}
    retrieve = [r for q in qids if (r := (standard[q] if "standard-rag" in run else first_round(run["auto"][q])))]
    skip = json.loads((HELDOUT / dataset / "run.json").read_text(encoding="utf-8")).get("skip", 0)
    return {
        "set": dataset,
        "n": len(qids),
        "first": skip + min((r["index"] for r in auto), default=0),  # a record's index counts from --skip
        "last": skip + max((r["index"] for r in auto), default=0),
        "em": em,
        "better": better,
        "gain": gain,
        "seconds": seconds,
        "standard_in_run": "standard-rag" in run,
        "escalated": sum(escalated(r["stop_reason"]) for r in auto),
        "planned": sum(planned(r) for r in auto),
        "chosen": Counter(operator_of(r) or "?" for r in auto).most_common(),
        "retrieve": retrieve,
        "iterate": rows["iter-retgen"],
        "linear": [r for r in auto if operator_of(r) == "linear"],  # the questions auto sent to the template
        "triples": list(zip(auto, rows["iter-retgen"], rows["standard-rag"])),
    }


def outcome_table(results: list[dict]) -> str:
    out = [
        "| set | questions | auto EM % [95%] | standard-rag | iter-retgen | auto minus the better, points [paired 95%] "
        "| auto s | iter-retgen s (same run) | ratio | escalated | parsed and planned | auto ran |",
        "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        n = r["n"]
        cell = {k: _em_cell(hits, n) for k, hits in r["em"].items()}
        g = r["gain"]
        std = cell["standard-rag"] + ("" if r["standard_in_run"] else " (record)")
        ratio = r["seconds"]["auto"] / r["seconds"]["iter-retgen"]
        chosen = ", ".join(f"{k} {v}" for k, v in r["chosen"])
        out.append(
            f"| {r['set']} | {r['first']}-{r['last']} ({n}) | {cell['auto']} | {std} | {cell['iter-retgen']} "
            f"| {100 * g.mean:+.1f} [{100 * g.low:+.1f}, {100 * g.high:+.1f}] vs {r['better']} "
            f"| {r['seconds']['auto']:.1f} | {r['seconds']['iter-retgen']:.1f} | {ratio:.2f} "
            f"| {r['escalated']} | {r['planned']} | {chosen} |"
        )
    return "\n".join(out)


def route_table(results: list[dict]) -> str:
    """What each route auto took scored, against iter-retgen and standard-rag on the same questions."""
    out = [
        "| set | question class | auto ran | n | auto right | iter-retgen right | standard-rag right | auto s | iter-retgen s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        groups: dict[tuple[str, str], list[tuple[dict, dict, dict]]] = defaultdict(list)
        for a, i, s in r["triples"]:
            kind = ((a.get("plan") or {}).get("physical") or {}).get("choice", {}).get("question_class", "?")
            route = (operator_of(a) or "?") + (", escalated" if escalated(a["stop_reason"]) else "")
            groups[(kind, route)].append((a, i, s))
        for (kind, route), rows in sorted(groups.items()):
            n, right, secs = _totals(rows)
            out.append(
                f"| {r['set']} | {kind} | {route} | {n} | {right[0]:.0f} | {right[1]:.0f} | {right[2]:.0f} "
                f"| {secs[0]:.1f} | {secs[1]:.1f} |"
            )
    return "\n".join(out)


def escalation_table(results: list[dict]) -> str:
    """Escalated questions answered by the template alone (the first run) and on the parsed plan (now)."""
    out = [
        "| set | escalated questions | template alone right | on the parsed plan right | iter-retgen right "
        "| parsed and planned | template alone s | on the plan s | iter-retgen s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        before = {x["qid"]: x for x in read_records(HELDOUT / r["set"] / "escalations-unplanned.jsonl", repair=False)}
        # a yes-no question run again since the bundle changed: its planned escalation is in the earlier records
        earlier = {x["qid"]: x for x in read_records(HELDOUT / r["set"] / EARLIER_BUNDLE, repair=False)}
        pairs = [(before[a["qid"]], earlier.get(a["qid"], a), i) for a, i, _ in r["triples"] if a["qid"] in before]
        if not pairs:
            continue
        n, right, secs = _totals(pairs)
        out.append(
            f"| {r['set']} | {n} | {right[0]:.0f} | {right[1]:.0f} | {right[2]:.0f} | {sum(planned(x[1]) for x in pairs)} "
            f"| {secs[0]:.1f} | {secs[1]:.1f} | {secs[2]:.1f} |"
        )
    return "\n".join(out)


def earlier_bundle_table(results: list[dict]) -> str:
    """Questions auto answered again after the bundle changed (their earlier records kept in
    SET/EARLIER_BUNDLE), the earlier answers beside today's and iter-retgen's and standard-rag's."""
    out = [
        "| set | questions | earlier bundle right | now right | iter-retgen right | standard-rag right "
        "| now chose | earlier s | now s | iter-retgen s |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        before = {x["qid"]: x for x in read_records(HELDOUT / r["set"] / EARLIER_BUNDLE, repair=False)}
        rows = [(before[a["qid"]], a, i, s) for a, i, s in r["triples"] if a["qid"] in before]
        if not rows:
            continue
        n, right, secs = _totals(rows)
        chose = ", ".join(f"{op} {k}" for op, k in Counter(operator_of(x[1]) or "?" for x in rows).most_common())
        out.append(
            f"| {r['set']} | {n} | "
            + " | ".join(f"{v:.0f}" for v in right)
            + f" | {chose} | "
            + " | ".join(f"{v:.1f}" for v in secs[:3])
            + " |"
        )
    return "\n".join(out)


def _totals(rows: list[tuple[dict, ...]]) -> tuple[int, list[float], list[float]]:
    """Rows of records side by side (one column per strategy): how many, each column's right answers and mean seconds."""
    n = len(rows)
    columns = list(zip(*rows))
    return n, [sum(r["em"] for r in c) for c in columns], [sum(r["seconds"] for r in c) / n for c in columns]


def _em_cell(hits: float, n: int) -> str:
    lo, hi = wilson_interval(hits, n)
    return f"{100 * hits / n:.1f} [{100 * lo:.0f}, {100 * hi:.0f}]"


def auroc_table(results: list[dict], texts: dict[str, dict[str, str]]) -> str:
    stats = load(BUNDLED, bundled=True)
    cal = stats.calibration
    columns = (*FEATURES, SUPPORTED, P_RIGHT)
    out = [
        "AUROC for exact match on the held-back questions of the table above, 95% interval by stratified "
        f"bootstrap; n = answers (right ones). `{P_RIGHT}`: the bundled calibration's probability (its "
        "best feature and its signals, fitted on each set's first 50 questions; '-' where it has no mapping "
        "for the operator). Linear's answers are those of the questions auto sent to the template, choice "
        "and yes-no ones (no run of the template on every held-back question carries confidence yet), so "
        "their `supported` says little: on a choice question an answer is supported when it names an "
        "offered option, on a yes-no question when it is yes or no, and the template's answers are held "
        "to both. The tree has none.",
    ]
    groups = [
        (r["set"], op, [(calibration_row(x, texts[r["set"]].get), operator_name({"strategy": s})) for x in r[op]])
        for r in results
        for op, s in OPERATOR_RECORDS.items()
    ]
    return "\n".join(out + auroc_body(groups, cal, columns))


def auroc_body(groups: list[tuple[str, str, list]], cal, columns) -> list[str]:
    """The table of an AUROC block: a row for each (set, operator, rows) that has rows, then each operator pooled."""
    out = ["", "| set | operator | n (right) | " + " | ".join(f"`{c}`" for c in columns) + " |"]
    out.append("|---|---|---|" + "---:|" * len(columns))
    pooled: dict[str, list] = defaultdict(list)
    for name, op, rows in groups:
        if rows:
            pooled[op] += rows
            out.append(auroc_row(name, op, rows, cal, columns))
    return out + [auroc_row("pooled", op, rows, cal, columns) for op, rows in pooled.items()]


def auroc_row(name: str, op: str, rows: list, cal, columns) -> str:
    cells = []
    for c in columns:
        pairs = []
        for row, operator in rows:
            if c == SUPPORTED:
                v = float(row.signals[SUPPORTED]) if SUPPORTED in row.signals else None
            elif c == P_RIGHT:
                mapping = None if cal is None else cal.operators.get(operator)
                v = None if mapping is None else mapping.probability(row.confidence, row.signals)
            else:
                v = feature(row.confidence, c)
            if v is not None:
                pairs.append((v, row.right))
        value = auroc([v for v, _ in pairs], [y for _, y in pairs])
        if value is None:
            cells.append("-")
            continue
        lo, hi = auroc_interval([v for v, _ in pairs], [y for _, y in pairs])
        cells.append(f"{value:.2f} [{lo:.2f}, {hi:.2f}]")
    right = sum(row.right for row, _ in rows)
    return f"| {name} | {op} | {len(rows)} ({right}) | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=Path, default=Path("docs/statistics.md"))
    args = parser.parse_args()
    results = [r for s in SETS if (r := measure(s))]
    texts = {r["set"]: texts_of(r["set"]) for r in results}
    outcome, routes, aurocs = outcome_table(results), route_table(results), auroc_table(results, texts)
    escalations, earlier = escalation_table(results), earlier_bundle_table(results)
    print(outcome, routes, escalations, earlier, aurocs, sep="\n\n")
    write_block(args.docs, "auto-heldout", outcome)
    write_block(args.docs, "auto-heldout-routes", routes)
    write_block(args.docs, "auto-heldout-escalations", escalations)
    write_block(args.docs, "auto-heldout-earlier-bundle", earlier)
    write_block(args.docs, "auto-heldout-auroc", aurocs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The decoder's confidence as a signal (issue 50): the bundled calibration and its held-back check.

`--bundle` refits the calibration in the bundled statistics (nlqo/planner/statistics/default.json)
on the calibration sample (the first FIRST questions of each set): retrieve's answers with their
confidence from the confidence runs (benchmarks/results/confidence/SET, `make bench-confidence`), and
the answers the operators a cascade escalates to gave on the same questions in `nlqo analyze`'s
records (benchmarks/results/statistics/SET/analyze, issue 38; recorded before confidence was read, so
an escalated answer is kept, as the cascade does without a probability to compare), or, for a set
without them, in the benchmark of record's (benchmarks/results/runs/SET). The operator figures stay
those the file was measured with, unless `--operators` summarises retrieve's, iterate's, the
template's and the tree's anew from the benchmark of record's first FIRST questions of every set (as
they were first made, from three sets). Then, for every set, the AUROC of each feature of each operator for exact
match on the held-back questions (after the first FIRST), with its interval, goes into
docs/statistics.md (block confidence-auroc). Nothing is fitted on the held-back questions.
"""

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

import attrs

from nlqo.common.docblocks import write_block
from nlqo.eval.records import read_records
from nlqo.eval.collect import calibrate, calibration_row, collect, operator_name, passage_ids
from nlqo.execution.operators.support import SUPPORTED
from nlqo.planner.statistics.calibration import FEATURES, TARGETS, auroc, auroc_interval, feature
from nlqo.planner.statistics.store import BUNDLED, load, save

RUNS = Path("benchmarks/results/confidence")
ANALYZED = Path("benchmarks/results/statistics")
AUTO = Path("benchmarks/results/confidence-auto")
RECORD = Path("benchmarks/results/runs")
NAMES = {
    "hotpotqa_dev_199": "HotpotQA",
    "2wiki_dev_300": "2Wiki",
    "musique_dev_200": "MuSiQue",
    "strategyqa_229": "StrategyQA",
}
MEASURED = ("retrieve", "iterate", "linear", "tree")
"""The bundle's operators measured from the benchmark of record's records (the cascade's come from `nlqo analyze`)."""
DATA = Path("../shared/data")


def records(folder: Path) -> list[dict]:
    return read_records(folder / "records.jsonl", repair=False)


def texts_of(dataset: str) -> dict[str, str]:
    with gzip.open(DATA / f"{dataset}_corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        return {p["id"]: p["text"] for p in map(json.loads, fh)}


def held_back_table(by_set: dict[str, list[dict]], first: int, texts: dict[str, dict[str, str]]) -> str:
    out = [
        f"AUROC for exact match on each set's held-back questions (index {first} on; nothing fitted on them), "
        "95% interval by stratified bootstrap; n = questions (right answers). A feature is read so that "
        "higher means more confident (entropies negated).",
        "",
        "| set | operator | n (right) | " + " | ".join(f"`{f}`" for f in (*FEATURES, SUPPORTED)) + " |",
        "|---|---|---|" + "---:|" * (len(FEATURES) + 1),
    ]
    pooled: dict[str, list] = defaultdict(list)
    for dataset, recs in by_set.items():
        for op, rows in _by_operator([r for r in recs if r["index"] >= first], texts[dataset]).items():
            pooled[op] += rows
            out.append(_row(dataset, op, rows))
    out += [_row("pooled", op, rows) for op, rows in sorted(pooled.items())]
    return "\n".join(out)


def auto_table() -> str:
    """auto's held-back answers (confidence-auto runs) beside the benchmark of record's on the same questions."""
    out = [
        "| set | auto now | standard-rag | iter-retgen | auto before | escalated | auto s / question |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    totals = defaultdict(float)
    for s, name in NAMES.items():
        if not (AUTO / s / "records.jsonl").is_file():
            continue
        auto = records(AUTO / s)
        ids = {r["qid"] for r in auto}
        row = {"auto now": sum(r["em"] for r in auto)}
        for strategy, label in (
            ("standard-rag", "standard-rag"),
            ("iter-retgen", "iter-retgen"),
            ("auto", "auto before"),
        ):
            row[label] = sum(r["em"] for r in records(RECORD / s) if r["strategy"] == strategy and r["qid"] in ids)
        escalated = sum(1 for r in auto if "escalated" in r["stop_reason"])
        seconds = sum(r["seconds"] for r in auto) / len(auto)
        n = len(auto)
        out.append(
            " | ".join([f"| {name}", *(f"{v:.0f}/{n}" for v in row.values()), str(escalated), f"{seconds:.1f} |"])
        )
        for k, v in row.items():
            totals[k] += v
        totals["n"] += n
        totals["escalated"] += escalated
    n = int(totals.pop("n", 0))
    if n:
        escalated = int(totals.pop("escalated"))
        cells = [f"{v:.0f}/{n}" for v in totals.values()]
        out.append(" | ".join(["| all", *cells, str(escalated), " |"]))
    return "\n".join(out)


def escalation_records(dataset: str) -> list[dict]:
    """The answers of the operators a cascade escalates to on a set: `nlqo analyze`'s records where the
    set has them (issue 38), else the benchmark of record's (the same operators under their bench names)."""
    for folder in (ANALYZED / dataset / "analyze", RECORD / dataset):
        if (folder / "records.jsonl").is_file():
            return records(folder)
    return []


def remeasured(stats, sets: list[str], first: int, texts):
    """``stats`` with retrieve's, iterate's, the template's and the tree's figures summarised anew from the
    benchmark of record's first ``first`` questions of each set (the cascade's, measured by `nlqo analyze`
    on its own runs, stay), and the sample's ids those questions'."""
    by_set = {
        s: [r for r in records(RECORD / s) if r["index"] < first and operator_name(r) in MEASURED]
        for s in sets
        if (RECORD / s / "records.jsonl").is_file()
    }
    fresh = collect([r for rs in by_set.values() for r in rs], measured_on=stats.measured_on, texts=texts).operators
    operators = {**stats.operators, **{op: fresh[op] for op in MEASURED if op in fresh}}
    ids = {s: list(dict.fromkeys(r["qid"] for r in sorted(rs, key=lambda r: r["index"]))) for s, rs in by_set.items()}
    sets = list(by_set)
    cascade = stats.source.split("; calibration:")[0]
    cascade = cascade.split("the cascade's figures: ")[-1] if "the cascade's figures: " in cascade else cascade
    source = (
        f"bundled: the first {first} questions of each shared dev set ({', '.join(NAMES[s] for s in sets)}), "
        "the benchmark of record's records (scripts/confidence.py --bundle --operators); the cascade's figures: "
        + cascade.removeprefix("bundled: ")
    )
    return attrs.evolve(stats, operators=operators, sample={"first": first, "ids": ids, "sets": sets}, source=source)


def unlinked_support(first: int) -> str:
    """Among retrieve's supported answers on the calibration samples, those found only in unlinked passages."""
    from nlqo.execution.operators.support import support

    unlinked = right = 0
    for s in NAMES:
        texts = texts_of(s)
        for r in records(RUNS / s):
            if r["strategy"] != "retrieve" or r["index"] >= first:
                continue
            passages = [texts.get(i, "") for i in passage_ids(r)]
            verdict = support(r["answer"], r["question"], passages)
            if verdict.reason == "found only in passages unlinked to the question's names":
                unlinked += 1
                right += r["em"] > 0
    return f"found only in unlinked passages: {unlinked}, of them right: {right}"


def _by_operator(recs: list[dict], texts: dict[str, str]) -> dict[str, list]:
    rows = defaultdict(list)
    for r in recs:
        rows[operator_name(r)].append(calibration_row(r, texts.get))
    return dict(sorted(rows.items()))


def _row(name: str, op: str, rows: list) -> str:
    right = [r.right for r in rows]
    cells = []
    for f in FEATURES:
        pairs = [(v, ok) for r, ok in zip(rows, right) if (v := feature(r.confidence, f)) is not None]
        cells.append(_cell([v for v, _ in pairs], [ok for _, ok in pairs]))
    sup = [(float(r.signals[SUPPORTED]), ok) for r, ok in zip(rows, right) if SUPPORTED in r.signals]
    cells.append(_cell([v for v, _ in sup], [ok for _, ok in sup]))
    return f"| {name} | {op} | {len(rows)} ({sum(right)}) | " + " | ".join(cells) + " |"


def _cell(scores: list[float], labels: list[bool]) -> str:
    value = auroc(scores, labels)
    if value is None:
        return "-"
    low, high = auroc_interval(scores, labels)
    return f"{value:.2f} [{low:.2f}, {high:.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=[p.name for p in sorted(RUNS.iterdir()) if p.is_dir()])
    parser.add_argument("--first", type=int, default=50, help="the calibration sample: each set's first N questions")
    parser.add_argument("--bundle", action="store_true", help="refit the bundled statistics' calibration")
    parser.add_argument(
        "--operators",
        action="store_true",
        help="with --bundle: measure the bundle's operator figures (not the cascade's) anew from the benchmark "
        "of record's first N questions of every set",
    )
    args = parser.parse_args()
    by_set = {s: records(RUNS / s) for s in args.sets}
    texts = {s: texts_of(s) for s in args.sets}
    if args.bundle:
        sample = [r for s, recs in by_set.items() for r in recs if r["index"] < args.first]
        for s in args.sets:
            sample += [r for r in escalation_records(s) if r["index"] < args.first and operator_name(r) in TARGETS]
        merged = {tid: t for s in args.sets for tid, t in texts[s].items()}
        stats = load(BUNDLED, bundled=True)
        if args.operators:
            stats = remeasured(stats, args.sets, args.first, merged.get)
        calibration = calibrate(sample, merged.get)
        note = f"; calibration: the first {args.first} of {', '.join(args.sets)} (scripts/confidence.py --bundle)"
        save(
            attrs.evolve(stats, calibration=calibration, source=stats.source.split("; calibration:")[0] + note), BUNDLED
        )
        print(f"refitted {BUNDLED} on {len(sample)} records")
    write_block(Path("docs/statistics.md"), "confidence-auroc", held_back_table(by_set, args.first, texts))
    write_block(Path("docs/statistics.md"), "confidence-auto", auto_table())
    print("wrote docs/statistics.md (confidence-auroc, confidence-auto)")
    print("retrieve's supported answers on the calibration samples,", unlinked_support(args.first))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Anchored parsing, side by side: do the parse's atoms name the question's entities?

A tree leaf or plan hint like ``?father father of ?child`` names no entity: it retrieves on its
predicate alone. Every question of the first ``--limit`` of each shared dev set is parsed, under the
generation grammar, in four modes by the same model:

- ``unanchored``: any atom may be all variables, and a constant is any string holding a word of
  the question (``anchored=False, spans=False``: the default);
- ``first-atom``: the grammar makes the first atom name a constant (``anchored=True, spans=False``);
- ``first-atom+repair``: that, and IR with atoms linked to no constant is sent back once
  (``anchor_repairs=1``);
- ``first-atom+spans``: the first atom anchored, and constants are runs of the question's words
  (``anchored=True, spans=True``).

Per parse it records the final IR, its atoms linked to no constant (``nlqo.parser.unanchored``),
the LLM calls, tokens generated and seconds; the summary also counts constants that are not in the
question (case and whitespace aside): the invented ones (``"1947-04-14 Bolelli"``, ``"?chemist"``).

    python benchmarks/bench_anchoring.py                       # 25 of each set; resumes
    python benchmarks/bench_anchoring.py --limit 2 --sets hotpotqa_dev_199 --out /tmp/anchoring --no-docs

Records are appended to ``OUT/records.jsonl`` one parse at a time (a killed run resumes);
``OUT/summary.json`` and the table in docs/ir.md are rewritten at the end. Nothing else should run
on the machine while it measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nlqo.eval.records import read_records  # noqa: E402

from _report import append_record, paired_by_set, write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "parse-anchoring"
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
MODES = {
    "unanchored": (False, 0, False),
    "first-atom": (True, 0, False),
    "first-atom+repair": (True, 1, False),
    "first-atom+spans": (True, 0, True),
}
"""Mode -> (anchored, anchor_repairs, spans)."""


def parse_one(llm, question, mode: str) -> dict:
    """Parse ``question`` in ``mode``; the record of it (a failure is a record too)."""
    from nlqo.errors import ParseFailure
    from nlqo.parser import parse_question, unanchored

    anchored, anchor_repairs, spans = MODES[mode]
    before = llm.total
    started = time.perf_counter()
    try:
        result = parse_question(question.question, llm, anchored=anchored, anchor_repairs=anchor_repairs, spans=spans)
    except ParseFailure as exc:
        result, failure = None, exc
    seconds = time.perf_counter() - started
    after = llm.total
    loose = list(unanchored(result.query)) if result is not None else None
    return {
        "qid": question.id,
        "question": question.question,
        "mode": mode,
        "valid": result is not None,
        "atoms": len(result.query.atoms) if result is not None else None,
        "loose": loose,
        "llm_calls": after.calls - before.calls,
        "generated_tokens": after.generated_tokens - before.generated_tokens,
        "seconds": round(seconds, 3),
        "ir": result.text if result is not None else (failure.attempts[-1] if failure.attempts else ""),
        "warnings": list(result.warnings) if result is not None else [],
    }


def run(args, llm) -> None:
    from nlqo.eval.datasets import QuestionSet

    handles = {mode: llm.fork() for mode in MODES}
    path = args.out / "records.jsonl"
    done = {(r["set"], r["qid"], r["mode"]) for r in read_records(path)}
    modes = list(MODES)
    for name in args.sets:
        questions = QuestionSet.load(DATA / f"{name}.jsonl.gz", limit=args.limit).questions
        for i, question in enumerate(questions):
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:  # each mode goes first as often
                if (name, question.id, mode) in done:
                    continue
                record = {"set": name, "index": i, **parse_one(handles[mode], question, mode)}
                append_record(path, record)
                print(
                    f"[{name} {i + 1}/{len(questions)}] {mode:10} loose={record['loose']} calls={record['llm_calls']} {record['seconds']:5.1f} s",
                    file=sys.stderr,
                    flush=True,
                )


def invented(record: dict) -> tuple[int, int]:
    """(constants, constants not in the question) of a record's IR, case and whitespace aside."""
    from nlqo.ir import Const
    from nlqo.syntax import parse

    if not record["valid"]:
        return 0, 0
    squeeze = lambda text: " ".join(text.lower().split())  # noqa: E731
    asked = squeeze(record["question"])
    constants = [t.text for a in parse(record["ir"]).atoms for t in (a.subject, a.object) if isinstance(t, Const)]
    return len(constants), sum(squeeze(c) not in asked for c in constants)


def _row(records: list[dict]) -> dict:
    n = len(records)
    valid = [r for r in records if r["valid"]]
    counts = [invented(r) for r in valid]
    return {
        "n": n,
        "valid": len(valid),
        "with_loose_atoms": sum(bool(r["loose"]) for r in valid),
        "loose_atoms": sum(len(r["loose"]) for r in valid),
        "atoms": sum(r["atoms"] for r in valid),
        "constants": sum(c for c, _ in counts),
        "invented_constants": sum(i for _, i in counts),
        "llm_calls_per_parse": round(sum(r["llm_calls"] for r in records) / n, 2),
        "generated_per_parse": round(sum(r["generated_tokens"] for r in records) / n, 1),
        "seconds_per_parse": round(sum(r["seconds"] for r in records) / n, 2),
    }


def summarize(args, records: list[dict]) -> dict:
    """Per set and overall, per mode, over the questions parsed in every mode."""
    summary = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model": args.model}
    summary["sets"] = paired_by_set(records, args.sets, MODES, _row)
    return summary


def table(summary: dict) -> str:
    head = (
        "| set | mode | questions | valid IR | IR with a loose atom | loose atoms / atoms | constants not in the question "
        "| LLM calls / parse | generated / parse | s / parse |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = [
        f"| {name} | {mode} | {r['n']} | {r['valid']} | {r['with_loose_atoms']} | {r['loose_atoms']} / {r['atoms']} "
        f"| {r['invented_constants']} / {r['constants']} "
        f"| {r['llm_calls_per_parse']:.2f} | {r['generated_per_parse']:.1f} | {r['seconds_per_parse']:.1f} |"
        for name, modes in summary["sets"].items()
        for mode, r in modes.items()
    ]
    note = (
        f"\n\n{summary['model']}, constrained parsing, repairs=2; a loose atom is linked through shared variables to no atom "
        f"naming a constant. `python benchmarks/bench_anchoring.py` ({summary['date']})."
    )
    return head + "\n" + "\n".join(rows) + note


def main(argv: list[str] | None = None) -> int:
    from nlqo.cli.common import DEFAULT_MODEL

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS, help="dev sets (default: all three)")
    p.add_argument("--limit", type=int, default=25, help="first N questions of each set (default: %(default)s)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model (default: %(default)s)")
    p.add_argument("--threads", type=int, help="LLM threads (default: the machine's cores)")
    p.add_argument("--out", type=Path, default=OUT, help="result folder (default: benchmarks/results/parse-anchoring)")
    p.add_argument("--no-docs", action="store_true", help="do not write the table into docs/ir.md (smoke tests)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from nlqo.models import load_local

    llm = load_local(args.model, threads=args.threads, progress=True)
    run(args, llm)
    summary = summarize(args, read_records(args.out / "records.jsonl"))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(table(summary))
    if not args.no_docs:
        write_block(ROOT / "docs" / "ir.md", "bench-anchoring", table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

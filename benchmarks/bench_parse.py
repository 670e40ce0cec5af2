"""Constrained vs unconstrained parsing, side by side (issue 13; docs/ir.md).

Every question of the first ``--limit`` of each shared dev set is parsed twice by the same model on
the same runtime: under the IR's generation grammar (``parse_question(constrained=True)``, the
default) and freely with repairs after the fact (``constrained=False``). Per parse it records
whether the first reply was valid IR, whether a valid IR came out within the repairs, the repair
calls, tokens generated and forced, prompt tokens, seconds, and for constrained parses the time
spent on token masks and on the model's forward passes after the prompt.

    python benchmarks/bench_parse.py                                 # 50 of each set; resumes
    python benchmarks/bench_parse.py --limit 2 --sets hotpotqa_dev_199 --out /tmp/parse --no-docs

Records are appended to ``OUT/records.jsonl`` one parse at a time (a killed run resumes where it
stopped); ``OUT/summary.json`` and the table in docs/ir.md are rewritten at the end. The two modes
alternate per question (which goes first too), each on its own handle of the model, so each keeps
its own warm prompt prefix. Nothing else should run on the machine while it measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nlqo.eval.records import read_records  # noqa: E402  (a torn last line is cut off: that run goes again)

from _report import append_record, paired_by_set, write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "benchmarks" / "results" / "parse"
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
MODES = {"constrained": True, "unconstrained": False}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _usage_since(llm, before) -> dict:
    after = llm.total
    return {
        "llm_calls": after.calls - before.calls,
        "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
        "cached_prompt_tokens": after.cached_prompt_tokens - before.cached_prompt_tokens,
        "generated_tokens": after.generated_tokens - before.generated_tokens,
        "forced_tokens": after.forced_tokens - before.forced_tokens,
    }


def parse_one(llm, question, mode: str, *, repairs: int, max_atoms: int) -> dict:
    """Parse ``question`` in ``mode``; the record of it (a failure is a record too)."""
    from nlqo.errors import ParseFailure
    from nlqo.parser import parse_question

    before = llm.total
    started = time.perf_counter()
    try:
        result = parse_question(question.question, llm, repairs=repairs, constrained=MODES[mode], max_atoms=max_atoms)
    except ParseFailure as exc:
        result, failure = None, exc
    seconds = time.perf_counter() - started
    attempts = result.attempts if result is not None else len(failure.attempts)
    return {
        "qid": question.id,
        "question": question.question,
        "mode": mode,
        "valid": result is not None,
        "valid_first": result is not None and result.attempts == 1,
        "attempts": attempts,
        "repair_calls": attempts - 1,
        "seconds": round(seconds, 3),
        **_usage_since(llm, before),
        "constrained_applied": result.constrained if result is not None else None,
        "mask_ms": round(result.mask_ms, 3) if result is not None else None,
        "decode_ms": round(result.decode_ms, 3) if result is not None else None,
        "atoms": len(result.query.atoms) if result is not None else None,
        "ir": result.text if result is not None else failure.attempts[-1] if failure.attempts else "",
        "error": None if result is not None else (failure.errors[-1] if failure.errors else str(failure)),
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
            for mode in modes[i % 2 :] + modes[: i % 2]:
                if (name, question.id, mode) in done:
                    continue
                record = {
                    "set": name,
                    "index": i,
                    **parse_one(handles[mode], question, mode, repairs=args.repairs, max_atoms=args.parse_atoms),
                }
                append_record(path, record)
                print(
                    f"[{name} {i + 1}/{len(questions)}] {mode:13} valid={record['valid']!s:5} first={record['valid_first']!s:5} "
                    f"gen={record['generated_tokens']:4} forced={record['forced_tokens']:4} {record['seconds']:6.1f} s",
                    file=sys.stderr,
                    flush=True,
                )


def _row(records: list[dict]) -> dict:
    n = len(records)
    if not n:
        return {"n": 0}
    mask = sum(r["mask_ms"] or 0.0 for r in records)
    decode = sum(r["decode_ms"] or 0.0 for r in records)
    return {
        "n": n,
        "valid_first_pct": round(100.0 * sum(r["valid_first"] for r in records) / n, 1),
        "valid_pct": round(100.0 * sum(r["valid"] for r in records) / n, 1),
        "repair_calls": sum(r["repair_calls"] for r in records),
        "generated_per_parse": round(sum(r["generated_tokens"] for r in records) / n, 1),
        "forced_per_parse": round(sum(r["forced_tokens"] for r in records) / n, 1),
        "computed_prompt_per_parse": round(sum(r["prompt_tokens"] - r["cached_prompt_tokens"] for r in records) / n, 1),
        "seconds_per_parse": round(sum(r["seconds"] for r in records) / n, 2),
        "mask_ms_per_parse": round(mask / n, 2),
        "mask_share_of_decode_pct": round(100.0 * mask / decode, 2) if decode else None,
    }


def summarize(args, records: list[dict]) -> dict:
    """Per set and overall, per mode, over the questions parsed in both modes."""
    meta = {
        "date": now(),
        "model": args.model,
        "runtime": args.runtime,
        "threads": args.threads,
        "repairs": args.repairs,
        "parse_atoms": args.parse_atoms,
    }
    summary = {**meta, "sets": paired_by_set(records, args.sets, MODES, _row)}
    return summary


def table(summary: dict) -> str:
    head = (
        "| set | mode | questions | valid IR, 1st reply | valid IR (≤ repairs) | repair calls | generated / parse "
        "| forced / parse | s / parse | mask time / decode time |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    rows = []
    for name, modes in summary["sets"].items():
        for mode, r in modes.items():
            share = "–" if r.get("mask_share_of_decode_pct") is None else f"{r['mask_share_of_decode_pct']:.2f}%"
            rows.append(
                f"| {name} | {mode} | {r['n']} | {r['valid_first_pct']:.0f}% | {r['valid_pct']:.0f}% | {r['repair_calls']} "
                f"| {r['generated_per_parse']:.1f} | {r['forced_per_parse']:.1f} | {r['seconds_per_parse']:.1f} | {share} |"
            )
    note = (
        f"\n\n{summary['model']} on {summary['runtime']} ({summary['threads'] or 'all'} threads), repairs={summary['repairs']}, "
        f"parse_atoms={summary['parse_atoms']}; `python benchmarks/bench_parse.py` ({summary['date']}). Forced tokens are appended "
        "without sampling; decode time is the model's forward passes after the prompt."
    )
    return head + "\n" + "\n".join(rows) + note


def main(argv: list[str] | None = None) -> int:
    from nlqo.cli.common import DEFAULT_MODEL
    from nlqo.ir_grammar import MAX_ATOMS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS, help="dev sets (default: all three)")
    p.add_argument("--limit", type=int, default=50, help="first N questions of each set (default: %(default)s)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="model (default: %(default)s)")
    p.add_argument(
        "--runtime",
        default="auto",
        choices=("auto", "llama-cpp", "transformers"),
        help="local runtime (default: %(default)s)",
    )
    p.add_argument("--threads", type=int, help="LLM threads (default: the machine's cores)")
    p.add_argument("--repairs", type=int, default=2, help="repair rounds, as the engine uses (default: %(default)s)")
    p.add_argument(
        "--parse-atoms", type=int, default=MAX_ATOMS, help="atoms a constrained reply may write (default: %(default)s)"
    )
    p.add_argument("--out", type=Path, default=OUT, help="result folder (default: benchmarks/results/parse)")
    p.add_argument("--no-docs", action="store_true", help="do not write the table into docs/ir.md (smoke tests)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    from nlqo.llm.backends import runtime_of
    from nlqo.models import load_local

    llm = load_local(args.model, runtime=args.runtime, threads=args.threads, progress=True)
    args.runtime = runtime_of(llm)
    run_info = {
        "date": now(),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "model": args.model,
        "runtime": args.runtime,
        "threads": args.threads,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    (args.out / "run.json").write_text(json.dumps(run_info, indent=2) + "\n")
    run(args, llm)
    summary = summarize(args, read_records(args.out / "records.jsonl"))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(table(summary))
    if not args.no_docs:
        write_block(ROOT / "docs" / "ir.md", "bench-parse", table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

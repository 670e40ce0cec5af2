"""``nlqo analyze --index DIR --questions FILE``: measure every operator on a labelled sample of
your questions and store the statistics ``auto`` chooses by beside the index, with the calibration
of the model's confidence (docs/statistics.md). ``--refit`` rebuilds them from the records already
there, running nothing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nlqo.cli.options import add_config_options
from nlqo.config import OPERATOR_NAMES
from nlqo.errors import ConfigError

DEFAULT_OPERATORS = ",".join(OPERATOR_NAMES)
RECORDS = "analyze"
"""Folder beside the index's files holding the sample's per-question records (resumable)."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="measure each operator on a labelled sample of your questions (statistics for auto)",
        description="Run every operator on the first N questions of a labelled question file (the bench's "
        "format), one question at a time, and store per operator and question class: exact match and F1 "
        "with 95% intervals, supported-answer rate, seconds, tokens and LLM calls, and the calibration of the "
        "model's confidence (each feature's AUROC for exact match, the escalation table, the cascade's fitted "
        "threshold and target), in statistics.json beside the index, with the model, runtime, embedder, k, "
        "retrieval mode and index they were measured on. 'nlqo ask' and 'nlqo explain' then choose operators "
        "by them. A killed run resumes where it stopped when run again; --refit rebuilds the file from the "
        "records without running anything.",
        epilog="Example: nlqo analyze --index .nlqo/demo-index --questions examples/demo_questions.jsonl --sample 6 "
        "--model smollm2-135m",
    )
    p.add_argument("--index", required=True, type=Path, metavar="DIR", help="index folder built by 'nlqo index'")
    p.add_argument(
        "--questions",
        metavar="FILE",
        help="questions with answers (.jsonl or .jsonl.gz: id, question, answers); required unless --refit",
    )
    p.add_argument("--sample", type=int, default=50, metavar="N", help="the first N questions (default: %(default)s)")
    p.add_argument(
        "--operators",
        default=DEFAULT_OPERATORS,
        metavar="LIST",
        help="comma-separated operators (default: %(default)s)",
    )
    add_config_options(p, names=("model", "runtime", "threads", "k", "retrieval"))
    p.add_argument(
        "--cluster",
        metavar="local:N|tcp://HOST:PORT",
        help="run the questions on Dask workers, as 'nlqo bench --cluster'",
    )
    p.add_argument("--out", type=Path, metavar="FILE", help="statistics file to write (default: DIR/statistics.json)")
    p.add_argument(
        "--records", type=Path, metavar="FOLDER", help=f"where the per-question records go (default: DIR/{RECORDS})"
    )
    p.add_argument(
        "--refit",
        action="store_true",
        help="run nothing: rebuild the statistics and their calibration from the records already in the records "
        "folder (the run that wrote them names the model, k and questions)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nlqo.cli import build_parser

    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = [o for o in operators if o not in OPERATOR_NAMES]
    if unknown or not operators:
        raise ConfigError(f"unknown operator {', '.join(unknown) or '(none)'}: choose from {DEFAULT_OPERATORS}")
    if args.sample < 1:
        raise ConfigError("--sample must be at least 1")
    if not (args.index / "manifest.json").is_file():
        raise ConfigError(
            f"{args.index}: not an nlqo index (no manifest.json); build one with 'nlqo index SOURCE --out {args.index}'"
        )
    folder = args.records or args.index / RECORDS
    if args.refit:
        if not (folder / "run.json").is_file():
            raise ConfigError(
                f"{folder}: no analyze records to refit (no run.json); run 'nlqo analyze' without --refit"
            )
        return write(statistics_of(folder, args.index), args.out, args.index)
    if not args.questions:
        raise ConfigError("--questions FILE is required (unless --refit rebuilds from the records)")
    model = args.model
    bench = [
        "bench", "--questions", args.questions, "--index", str(args.index), "--out", str(folder), "--limit", str(args.sample),
        "--strategies", ",".join(operators), "--model", model, "--runtime", args.runtime, "-k", str(args.k), "--retrieval", args.retrieval,
    ]  # fmt: skip
    bench += ["--threads", str(args.threads)] if args.threads else []
    bench += ["--cluster", args.cluster] if args.cluster else []
    bench += ["--quiet"] if args.quiet else []
    bench_args = build_parser().parse_args(bench)
    if bench_args.func(bench_args) != 0:
        return 1
    return write(statistics_of(folder, args.index), args.out, args.index)


def write(stats, out: Path | None, index: Path) -> int:
    """Save ``stats`` (to ``out``, else beside ``index``) and print their tables."""
    from nlqo.planner.statistics.store import FILENAME, save

    path = save(stats, out or index / FILENAME)
    print(table(stats))
    print()
    print(calibration_table(stats.calibration))
    print(
        f"nlqo: wrote {path} ({stats.sample.get('questions', '?')} questions); 'nlqo ask' and 'nlqo explain' now choose by it",
        file=sys.stderr,
    )
    return 0


def statistics_of(folder: Path, index_dir: Path):
    """Statistics from an analyze run's records, measured on what its run.json names."""
    import json

    from nlqo.eval.records import read_records
    from nlqo.index.search import Index
    from nlqo.eval.collect import collect
    from nlqo.planner.statistics.store import index_digest

    info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    records = [r for r in read_records(folder / "records.jsonl") if r["strategy"] in info["strategies"]]
    index = Index.open(index_dir, verify=False)
    measured_on = {
        "model": info["model"], "runtime": info["runtime"], "embedder": index.manifest.embedder, "k": info["k"],
        "retrieval": info["retrieval"], "index_digest": index_digest(index.manifest),
    }  # fmt: skip
    qids = list(dict.fromkeys(r["qid"] for r in records))
    sample = {
        "questions_file": info.get("questions_file"),
        "questions_sha256": info.get("questions_sha256"),
        "questions": len(qids),
        "ids": qids,
    }

    def text(passage_id: str) -> str:
        passage = index.get(passage_id)
        return "" if passage is None else f"{passage.title} {passage.text}"

    return collect(
        records, measured_on=measured_on, sample=sample, texts=text, source=f"nlqo analyze on {len(qids)} questions"
    )


def table(stats) -> str:
    from nlqo.planner.statistics.store import ALL

    lines = [
        "| operator | class | n | EM (95% interval) | F1 | supported | seconds | LLM calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for op, classes in stats.operators.items():
        for name in [ALL, *sorted(c for c in classes if c != ALL)]:
            s = classes[name]
            lines.append(
                f"| {op} | {name} | {s.n} | {s.em:.1%} [{s.em_low:.1%}, {s.em_high:.1%}] | {s.f1:.2f} | {s.supported:.0%} | {s.seconds:.1f} | {s.llm_calls:.1f} |"
            )
    return "\n".join(lines)


def calibration_table(cal) -> str:
    """The calibration as tables: each operator's AUROC per feature (95% interval, n), the escalation
    table, and the cascade plan with the shares it was fitted over."""
    from nlqo.planner.statistics.calibration import FEATURES, SIGNALS

    if cal is None:
        return "Calibration: none (no record carries the model's confidence: its backend reads none, or the records are older)"
    ops = list(cal.operators)
    lines = [
        f"Calibration: AUROC for exact match, 95% interval, n ({cal.method}); * the operator's best feature",
        "",
        "| feature | " + " | ".join(ops) + " |",
        "|---|" + "---|" * len(ops),
    ]
    for name in (*FEATURES, *SIGNALS):
        cells = []
        for op in ops:
            d = cal.operators[op].features.get(name)
            if d is None or d.auroc is None:
                cells.append("-")
            else:
                star = "*" if name == cal.operators[op].best else ""
                cells.append(f"{d.auroc:.2f}{star} [{d.low:.2f}, {d.high:.2f}] n={d.n}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if cal.escalation:
        lines += ["", "Escalation: each operator's EM on the questions where X's best feature is lowest", ""]
        lines += ["| X | part | n | " + " | ".join(ops) + " |", "|---|---|---|" + "---|" * len(ops)]
        for x, rows in cal.escalation.items():
            for row in rows:
                cells = [f"{row.em[op]:.1%}" if op in row.em else "-" for op in ops]
                lines.append(
                    f"| {x} | lowest {row.part} (< {row.threshold:.2f}) | {row.n} | " + " | ".join(cells) + " |"
                )
    plan = cal.cascade
    if plan is None:
        lines += ["", "Cascade: no calibrated plan (it needs calibrated retrieve and another operator): by support"]
        return "\n".join(lines)
    whole = plan.mixes["all"]
    when = "it is unsupported (no confidence threshold)"
    if plan.threshold is not None:
        when = f"{plan.feature} < {plan.threshold:.3f} or it is unsupported"
    lines += [
        "",
        f"Cascade: escalate retrieve's answer when {when}, to "
        f"{plan.target}; keep the answer trusted more. On the sample (n={plan.n}): {whole.escalated:.0%} escalated, "
        f"{whole.kept_first:.0%} of those kept the first answer; EM {whole.em:.1%} [{whole.em_low:.1%}, "
        f"{whole.em_high:.1%}], {whole.mean_seconds(True):.1f} s"
        + (f" ({whole.planning:.1f} s of it the escalations' parse and plan)" if whole.planning else ""),
        "",
        "| least confident share | threshold | target | target's EM there | escalated | EM | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in plan.options:
        mark = " (chosen)" if o.share == plan.share else ""
        shown = "-" if o.threshold is None else f"{o.threshold:.3f}"
        lines.append(
            f"| {o.share:.0%}{mark} | {shown} | {o.target} | {o.target_em:.1%} | {o.escalated:.0%} | {o.em:.1%} | {o.seconds:.1f} |"
        )
    return "\n".join(lines)

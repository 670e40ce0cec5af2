"""``nlqo explain "QUESTION" --index DIR [--analyze]``: the physical plan, and with --analyze its actuals."""

from __future__ import annotations

import argparse
from pathlib import Path

from nlqo.explain import formats
from nlqo.cli import common
from nlqo.errors import ParseFailure
from nlqo.execution.trace import Trace
from nlqo.parser.questions import check_question


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "explain",
        help="EXPLAIN [ANALYZE] a question: parse, optimise, lower, and optionally execute",
        description="Parse and optimise the question, lower the plan to a physical operator and print it. "
        "With --analyze the plan is executed and each node is annotated with actual time, LLM calls, tokens "
        "(computed / from cache / generated, + forced by a grammar), passages and the terminator score, then how the question "
        "was parsed and the planning and execution totals.",
        epilog='Example: nlqo explain "Who was born first, Ada Lovelace or Charles Babbage?" --index .nlqo/demo-index --analyze '
        "--format html --out plan.html",
    )
    p.add_argument("question", help="the question, in quotes")
    common.add_engine_options(p)
    p.add_argument("--analyze", action="store_true", help="execute the plan and annotate it with actuals")
    p.add_argument(
        "--format",
        choices=formats.OutputFormat.values(),
        default="text",
        help="output format; html is one self-contained page (docs/explain.md) (default: %(default)s)",
    )
    p.add_argument("--out", "-o", type=Path, metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_question(args.question, max_chars=args.max_question_chars)  # before a model loads
    with common.build_engine(args) as engine:
        return _explain(args, engine)


def _explain(args: argparse.Namespace, engine) -> int:
    trace = Trace(on_step=common.progress_printer(not args.quiet))
    strategy = args.strategy
    planned = common.plan_question(engine, args, trace)
    if planned.physical is None:
        last = (planned.error or "").rsplit(">>> ", 1)[-1].strip()
        raise ParseFailure(
            "the question could not be parsed into a plan ('nlqo ask' falls back to the linear template; "
            f"'nlqo parse' shows the IR, and --ir FILE plans a hand-written one); the last error: {last}",
            attempts=(),
            errors=(),
        )
    physical = planned.physical
    result = engine.execute(args.question, planned, strategy=strategy, trace=trace) if args.analyze else None
    formats.write(
        formats.render(formats.PhysicalView.of(engine.optimizer, physical, result), args.format),
        args.out,
        say=not args.quiet,
    )
    return 0

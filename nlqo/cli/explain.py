"""``nlqo explain "QUESTION" --index DIR [--analyze]``: the physical plan, and with --analyze its actuals."""

from __future__ import annotations

import argparse

from nlqo.explain import formats
from nlqo.cli import common
from nlqo.errors import ParseFailure
from nlqo.execution.trace import Trace


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
    common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with common.question_engine(args) as engine:
        trace = Trace(on_step=common.progress_printer(not args.quiet))
        planned = common.plan_question(engine, args, trace)
        if planned.physical is None:
            last = (planned.error or "").rsplit(">>> ", 1)[-1].strip()
            raise ParseFailure(
                "the question could not be parsed into a plan ('nlqo ask' falls back to the linear template; "
                f"'nlqo parse' shows the IR, and --ir FILE plans a hand-written one); the last error: {last}",
                attempts=(),
                errors=(),
            )
        result = engine.execute(args.question, planned, strategy=args.strategy, trace=trace) if args.analyze else None
        view = formats.PhysicalView.of(engine.optimizer, planned.physical, result)
        formats.write(formats.render(view, args.format), args.out, say=not args.quiet)
        return 0

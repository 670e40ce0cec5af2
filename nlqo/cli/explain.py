"""``nlqo explain "QUESTION" --index DIR [--analyze]``: the physical plan, and with --analyze its actuals."""

from __future__ import annotations

import argparse
import json

from nlqo import explain as logical
from nlqo.cli import common
from nlqo.cost import CostContext
from nlqo.errors import ParseFailure
from nlqo.execute import analyze
from nlqo.execute.trace import Trace


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "explain",
        help="EXPLAIN [ANALYZE] a question: parse, optimise, lower, and optionally execute",
        description="Parse and optimise the question, lower the plan to a physical operator and print it. "
        "With --analyze the plan is executed and each node is annotated with actual time, LLM calls, tokens "
        "(computed / from cache / generated), passages and the terminator score, then planning and execution totals.",
        epilog='Example: nlqo explain "Who was born first, Ada Lovelace or Charles Babbage?" --index .nlqo/demo-index --analyze',
    )
    p.add_argument("question", help="the question, in quotes")
    common.add_engine_options(p)
    p.add_argument("--analyze", action="store_true", help="execute the plan and annotate it with actuals")
    p.add_argument("--format", choices=("text", "json", "dot"), default="text", help="output format (default: %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    engine = common.build_engine(args)
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
    model = engine.optimizer.cost_model
    costs = logical.node_costs(physical.logical, model, CostContext(physical.logical.query, physical.logical.relations, engine.optimizer.embedder))
    if args.format == "json":
        print(json.dumps(analyze.to_dict(result, physical, model=model, costs=costs), indent=2, ensure_ascii=False))
    elif args.format == "dot":
        notes = analyze.actual_annotations(result, physical) if result else analyze.physical_annotations(physical)
        print(logical.dot(physical.logical, costs=costs, annotations=notes))
    else:
        print(analyze.text(result, physical, model=model, costs=costs))
    return 0

"""``nlqo plan FILE.nlqo``: optimise an IR file and print its EXPLAIN."""

from __future__ import annotations

import argparse
from pathlib import Path

from nlqo.explain import formats, render
from nlqo.main.builder import build_optimizer, load_model
from nlqo.cli import common
from nlqo.optimizer.cost import CostContext


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="optimise an IR file and EXPLAIN the plan",
        description="Parse an IR file, run the rewrite rules and the optimizer, and print the chosen "
        "logical query tree with its cost terms (text), the stable JSON form, graphviz DOT, or one HTML page.",
        epilog="Example: nlqo plan examples/counterparts.nlqo --format text --verbose",
    )
    p.add_argument("file", type=Path, help="an IR file (.nlqo); '-' reads standard input")
    common.add_output_options(p)
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        default=argparse.SUPPRESS,
        help="add the search summary and every pair relation (and, as 'nlqo --verbose' does, show the model libraries' messages)",
    )
    p.add_argument(
        "--model",
        metavar="NAME",
        help="ask this LLM about atom pairs the triples leave undecided (default: treat them as siblings)",
    )
    p.add_argument(
        "--context-merge",
        action="store_true",
        help="with --model: confirm LLM-decided edges with the partial plan in the prompt",
    )
    p.add_argument(
        "--embedder", metavar="NAME|PATH", help="embedder for the similarity metric (default: all-minilm-l6-v2)"
    )
    common.add_runtime_options(p)
    common.add_planning_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    query = common.read_ir(args.file)
    config = common.config_from_args(args)
    # The config's model always has a value (its default); plan asks an LLM only when told to.
    optimizer = build_optimizer(config, llm=load_model(config) if args.model else None)
    plan = optimizer.optimize(query)
    ctx = CostContext(plan.query, plan.relations, optimizer.embedder)
    costs = render.node_costs(plan, optimizer.cost_model, ctx)
    view = formats.LogicalView(plan, model=optimizer.cost_model, costs=costs, verbose=getattr(args, "verbose", False))
    formats.write(formats.render(view, args.format), args.out)
    return 0

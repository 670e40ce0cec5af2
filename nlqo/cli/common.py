"""Options shared by several commands (generated from :class:`~nlqo.config.EngineConfig` by
:mod:`nlqo.cli.options`), and building the engine they describe."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nlqo.cli.options import add_config_options, config_from_args
from nlqo.config import DEFAULT_MODEL
from nlqo.execution.trace import progress_line
from nlqo.kinds import OutputFormat
from nlqo.parser.questions import check_question
from nlqo.runtime.llm.backends import load_llm

__all__ = [
    "DEFAULT_MODEL",
    "add_engine_options",
    "add_planning_options",
    "config_from_args",
    "load_llm",
]
# load_llm lives in nlqo.runtime.llm.backends (backends are packages, entry points nlqo.backends); it is
# re-exported here for callers of the old path. nlqo.main.builder.load_model is its one caller.


PLANNING = ("params", "rules", "path", "budget", "beam", "max_atoms", "relations_cache")
"""The planning flags besides ``--cost-model`` (the bench takes a list of cost models instead)."""
RUNTIME = ("runtime", "quantize", "threads")
CONSTRAINED = ("constrained", "parse_atoms", "anchored", "span_constants", "anchor_repairs")


def add_planning_options(parser: argparse.ArgumentParser, *, variants: bool = False) -> None:
    """--cost-model, --param, --rules, --path and the search limits (``variants``: no --cost-model;
    the bench takes a list of them among its ablations)."""
    group = parser.add_argument_group("planning")
    add_config_options(group, names=PLANNING if variants else ("cost_model", *PLANNING))


def add_runtime_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--runtime, --quantize and --threads: how a local model is run."""
    add_config_options(parser, names=RUNTIME)


def add_constrained_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--constrained on|off``, ``--parse-atoms``, ``--anchored on|off``, ``--span-constants on|off`` and
    ``--anchor-repairs``: how the question is parsed (docs/ir.md)."""
    add_config_options(parser, names=CONSTRAINED)


def add_engine_options(parser: argparse.ArgumentParser, *, ir: bool = True) -> None:
    """Every engine option, one help group per section of :class:`EngineConfig`, with --index,
    --ir (``ir``) and --quiet."""
    parser.add_argument("--index", required=True, type=Path, metavar="DIR", help="index folder built by 'nlqo index'")
    if ir:
        parser.add_argument(
            "--ir",
            type=Path,
            metavar="FILE",
            help="use this IR file (e.g. from 'nlqo parse', or hand-written) instead of asking the LLM to parse the question",
        )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    add_config_options(parser, grouped=True)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--format`` and ``--out``: what ``nlqo plan`` and ``nlqo explain`` print, and where."""
    parser.add_argument(
        "--format",
        choices=OutputFormat.values(),
        default="text",
        help="output format; html is one self-contained page (docs/explain.md) (default: %(default)s)",
    )
    parser.add_argument("--out", "-o", type=Path, metavar="FILE", help="write to FILE instead of standard output")


def build_engine(args: argparse.Namespace):
    """The engine the command's options describe."""
    from nlqo.main.engine import Engine

    return Engine.from_config(config_from_args(args), progress=not getattr(args, "quiet", False))


def question_engine(args: argparse.Namespace):
    """:func:`build_engine` for a command about ``args.question``, checked before a model loads."""
    check_question(args.question, max_chars=args.max_question_chars)
    return build_engine(args)


def read_ir(path: Path, question: str | None = None):
    """The query of an IR file (``-`` reads standard input), with ``question`` attached when it has none."""
    import attrs

    from nlqo.ir.syntax import parse_bytes, read

    query = parse_bytes(sys.stdin.buffer.read(), source="<stdin>") if str(path) == "-" else read(path)
    if query.question is None and question is not None:
        query = attrs.evolve(query, question=question)
    return query


def plan_question(engine, args: argparse.Namespace, trace):
    """Plan from ``--ir`` when given, else as ``nlqo ask`` runs it (:meth:`~nlqo.main.engine.Engine.prepare`):
    the question parsed with the LLM, or as one atom for an operator that needs no plan."""
    if args.ir is None:
        return engine.prepare(args.question, strategy=args.strategy, trace=trace)
    return engine.plan_query(read_ir(args.ir, args.question), strategy=args.strategy, trace=trace)


def progress_printer(enabled: bool):
    """A trace callback printing one line per step to standard error."""

    def show(step) -> None:
        line = progress_line(step)
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    return show if enabled else None

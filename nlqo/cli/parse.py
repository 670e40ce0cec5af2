"""``nlqo parse "QUESTION"``: print the IR an LLM writes for a question."""

from __future__ import annotations

import argparse
import sys

from nlqo.cli import common
from nlqo.cli.options import add_config_options
from nlqo.parser.parse import parse_configured
from nlqo.parser.questions import check_question


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "parse",
        help="print the IR an LLM writes for a question",
        description="Ask the LLM to rewrite the question as atoms in the nlqo IR, validate it with the "
        "grammar, repair it within a bound, and print the canonical IR (ready for 'nlqo plan').",
        epilog='Example: nlqo parse "In which city was the director of the film Jaws born?" > q.nlqo && nlqo plan q.nlqo',
    )
    p.add_argument("question", help="the question, in quotes")
    add_config_options(p, names=("model", "repairs", "max_question_chars", "ir_cleanup"))
    common.add_runtime_options(p)
    common.add_constrained_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nlqo.main.builder import load_model

    config = common.config_from_args(args)
    check_question(args.question, max_chars=config.max_question_chars)  # before the model loads
    llm = load_model(config)
    result = parse_configured(args.question, llm, config)
    sys.stdout.write(result.text)
    for w in result.warnings:
        print(f"# warning: {w}", file=sys.stderr)
    usage = result.usage
    print(
        f"# {result.describe()}; {usage.generated_tokens} tokens generated, {usage.forced_tokens} forced, {usage.wall_ms / 1000:.1f} s",
        file=sys.stderr,
    )
    return 0

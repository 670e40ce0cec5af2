"""The ``nlqo`` command line. Each subcommand lives in its own module of this package.

A command module defines ``register(subparsers)``, which adds its parser and sets
``func=run`` on it; ``run(args)`` returns the process exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from nlqo import __version__
from nlqo.errors import NlqoError

COMMANDS = ("parse", "plan", "models", "index", "retrieve", "ask", "explain", "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nlqo",
        description="A natural-language query optimizer: parse a multi-hop question into triples, "
        "optimise a logical query tree, execute it with retrieval, and EXPLAIN every step.",
        epilog="Run 'nlqo COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"nlqo {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"nlqo.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"nlqo.cli.{name}":
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except NlqoError as exc:
        print(f"nlqo: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nlqo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (nlqo plan ... | head): stop quietly
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())

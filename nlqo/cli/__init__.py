"""The ``nlqo`` command line. Each subcommand lives in its own module of this package.

A command module defines ``register(subparsers)``, which adds its parser and sets
``func=run`` on it; ``run(args)`` returns the process exit code. :func:`main` runs it with the
model libraries' messages routed to the log file (:mod:`nlqo.common.logs`) and turns every exception into
one line and an exit code (:data:`EXIT_CODES`): the user never sees a traceback unless ``--verbose``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import shlex
import sys
import textwrap

from nlqo import __version__
from nlqo.common import logs
from nlqo.errors import NlqoError

COMMANDS = (
    "parse",
    "plan",
    "models",
    "index",
    "retrieve",
    "ask",
    "explain",
    "analyze",
    "bench",
    "bench-plans",
    "serve",
)

EXIT_OK, EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 0, 2, 70, 130, 141
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_ERROR: "an error nlqo explains in one 'nlqo: error: ...' line (bad input, a missing model or index, a failed backend), or bad usage",
    EXIT_INTERNAL: "internal error (a bug in nlqo): one line names it; the traceback is in the log file (--verbose prints it)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "the reader of the output went away (nlqo ... | head)",
}
"""Exit codes of ``nlqo`` (70 is sysexits.h's EX_SOFTWARE), listed in ``nlqo --help``."""

VERBOSE_HELP = "also show the model libraries' messages (llama.cpp, transformers) and tracebacks on stderr; they always go to the log file"


def epilog() -> str:
    """The top-level help's tail: the exit codes and where the log file is."""
    codes = "\n".join(
        textwrap.fill(text, 78, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
        for code, text in EXIT_CODES.items()
    )
    log = textwrap.fill(
        f"log file: the messages of llama.cpp, transformers and sentence-transformers, and tracebacks, go to ${logs.ENV} "
        "(default: logs/nlqo.log in $NLQO_CACHE, else in ~/.cache/nlqo); --verbose also prints them.",
        78,
    )
    return f"Run 'nlqo COMMAND --help' for the options of a command.\n\nexit codes:\n{codes}\n\n{log}"


class CommandParser(argparse.ArgumentParser):
    """A command's parser: an option it does not know is an error shown with this command's usage
    (argparse would pass it up to the top-level parser, which shows its own)."""

    def parse_known_args(self, args=None, namespace=None):
        parsed, extra = super().parse_known_args(args, namespace)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nlqo",
        description="A natural-language query optimizer: parse a multi-hop question into triples, "
        "optimise a logical query tree, execute it with retrieval, and EXPLAIN every step.",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nlqo {__version__}")
    parser.add_argument("--verbose", "-v", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CommandParser)
    for name in COMMANDS:
        module_name = f"nlqo.cli.{name.replace('-', '_')}"  # bench-plans lives in bench_plans.py
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        module.register(subparsers)
    for sub in subparsers.choices.values():
        try:  # also after the command; default SUPPRESS keeps a --verbose given before it
            sub.add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
        except argparse.ArgumentError:  # the command has its own --verbose (plan), which implies this one
            pass
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: this program's arguments) and return its exit code; as the
    program itself (no ``argv``) it then leaves at once (:func:`leave`)."""
    code = run(argv)
    if argv is None:
        leave(code)
    return code


def leave(code: int) -> None:
    """Exit with ``code`` once the exit handlers ran and the output is flushed, skipping the interpreter's
    teardown of torch, transformers and the model libraries (about a second of a command's wall time)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (the command said so already), or a closed stream
            pass
    os._exit(code)


def run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    with logs.routed(verbose=args.verbose) as route:
        try:
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a reader gone shows here, not in an ignored exception at exit
            return code
        except NlqoError as exc:
            print(f"nlqo: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            print("nlqo: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except BrokenPipeError:  # the reader went away (nlqo plan ... | head): stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_BROKEN_PIPE
        except Exception as exc:  # noqa: BLE001 - a bug: one line for the user, the traceback in the log
            return internal_error(exc, route, sys.argv[1:] if argv is None else argv)


def internal_error(exc: Exception, route: logs.Route, argv: list[str]) -> int:
    """Log ``exc`` with its traceback (stderr too when verbose), print one line naming it; :data:`EXIT_INTERNAL`."""
    logging.getLogger("nlqo.cli").error("internal error in: nlqo %s", shlex.join(argv), exc_info=exc)
    where = (
        f"the traceback is in {route.path}"
        if route.path
        else "no log file could be written; --verbose prints the traceback"
    )
    print(f"nlqo: internal error: {type(exc).__name__}: {exc} ({where}; please report it)", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

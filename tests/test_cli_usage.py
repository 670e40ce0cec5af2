"""Bad usage of a command is shown with that command's usage (issue 52)."""

from __future__ import annotations

import argparse

import pytest

from nlqo.cli import COMMANDS, build_parser, main


def _commands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def required_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """Values for the command's required arguments, so that only the unknown option is wrong; for a
    command with subcommands, the first subcommand and its own."""
    argv: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name, sub = next(iter(action.choices.items()))
            return argv + [name, *required_arguments(sub)]
        if not action.required:
            continue
        value = str(action.choices[0]) if action.choices else "x"
        argv += [value] if not action.option_strings else [action.option_strings[0], value]
    return argv


@pytest.mark.parametrize("command", [c for c in COMMANDS if c in _commands()])
def test_an_unknown_option_of_a_command_is_shown_with_that_commands_usage(capsys, command):
    """Before, 'nlqo ask "..." --index idx --bogus' printed the top-level usage ('usage: nlqo [-h]
    [--version] [--verbose] COMMAND ...') and 'nlqo: error: unrecognized arguments: --bogus'."""
    parser = _commands()[command]
    argv = [command, *required_arguments(parser), "--bogus"]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    prog = parser.prog
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):  # models: its subcommand's usage
        prog = f"{prog} {argv[1]}"
    assert exit_.value.code == 2
    assert err.startswith(f"usage: {prog} ") and err.endswith(f"\n{prog}: error: unrecognized arguments: --bogus\n"), (
        err
    )


def test_an_option_before_the_command_that_nlqo_does_not_know_is_still_the_top_level_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--bogus", "plan", "q.nlqo"])
    err = capsys.readouterr().err
    assert (
        exit_.value.code == 2
        and err.startswith("usage: nlqo [-h]")
        and err.endswith("nlqo: error: unrecognized arguments: --bogus\n")
    )


def test_the_program_leaves_at_once_with_its_code_its_whole_output_and_its_exit_handlers_run():
    """As the program (no argv), main skips the interpreter's teardown: the exit code, everything written
    to a pipe, and the exit handlers registered before must survive that."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).parents[1] / "examples" / "director_birthplace.nlqo"
    program = (
        "import atexit, sys; import nlqo.cli; "
        "atexit.register(lambda: print('handler ran', file=sys.stderr)); "
        "sys.argv = ['nlqo', *sys.argv[1:]]; nlqo.cli.main(); print('not reached', file=sys.stderr)"
    )
    ok = subprocess.run(
        [sys.executable, "-c", program, "plan", str(example), "--format", "json"], capture_output=True, text=True
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["nodes"] and ok.stderr.strip() == "handler ran"
    bad = subprocess.run([sys.executable, "-c", program, "plan", "/nonexistent.nlqo"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines()[-1] == "handler ran" and "nlqo: error: /nonexistent.nlqo" in bad.stderr
    assert "not reached" not in ok.stderr + bad.stderr

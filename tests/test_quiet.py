"""Quiet loading and no traceback: the model libraries' messages go to the log file (stderr only with
--verbose), nlqo's own lines stay, and an unexpected exception is one line and exit code 70.

The last test runs the real CLI on the bundled smollm2-135m (llama.cpp) and the real embedder
(sentence-transformers) as a user would, in a subprocess, and reads its stderr and log file.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import nlqo
from nlqo.common import logs
from nlqo.cli import EXIT_CODES, main
from nlqo.runtime.llm import llamacpp
from realmodels import unavailable

REPO = Path(__file__).resolve().parents[1]
OLDER = REPO / "examples" / "older.nlqo"
CONTROL = "load: control-looking token: 128247 '</s>' was not control-type; this is probably a bug in the model. its type will be overridden"
INTERNALS = (
    "llama_",
    "load_tensors",
    "control-looking",
    "Loading weights",
    "print_info",
    "sentence_transformers",
    "faiss",
    "ggml",
)
"""Text of llama.cpp, transformers and sentence-transformers internals that a user must not see by default."""


@pytest.fixture
def log_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "logs" / "nlqo.log"
    monkeypatch.setenv(logs.ENV, str(path))
    return path


# --- llama.cpp's log callback ---------------------------------------------------------------------


def test_llama_cpp_messages_become_one_record_per_line_at_ggml_levels(caplog):
    callback = llamacpp._LogLines()
    with caplog.at_level(logging.DEBUG, logger=llamacpp.LOG.name):
        callback(2, b"llama_model_loader: loaded meta data with 33 key-value pairs\n", None)
        callback(3, CONTROL.encode() + b"\n", None)
        callback(2, b"load_tensors: loading", None)
        callback(5, b" model tensors\n", None)  # CONT continues the line at its level
        callback(2, b".", None)
        callback(5, b".", None)
        callback(4, b"llama_model_load: error loading model\n", None)  # a new message ends the dots
        callback(1, b"a debug line\xff\n", None)
        callback(2, None, None)  # a null text is no crash
    got = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert got == [
        (logging.INFO, "llama_model_loader: loaded meta data with 33 key-value pairs"),
        (logging.WARNING, CONTROL),
        (logging.INFO, "load_tensors: loading model tensors"),
        (logging.INFO, ".."),
        (logging.ERROR, "llama_model_load: error loading model"),
        (logging.DEBUG, "a debug line\ufffd"),
    ]


def test_without_the_cli_llama_cpp_records_reach_no_terminal():
    code = f"from nlqo.runtime.llm import llamacpp; llamacpp.LOG.warning({CONTROL!r})"  # no logging configured: a library user
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (0, "")


# --- routing --------------------------------------------------------------------------------------


def emit_all() -> None:
    """A record of each library, a warning from outside nlqo and one from inside it."""
    llamacpp.LOG.warning(CONTROL)
    logging.getLogger("sentence_transformers.base.model").info("Loading SentenceTransformer model")
    warnings.warn_explicit("a torch deprecation", FutureWarning, "/elsewhere/torch/nn.py", 7)
    warnings.warn_explicit(
        "skipped 2 bad corpus records", UserWarning, str(Path(nlqo.__file__).parent / "index" / "corpus.py"), 65
    )


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_library_records_go_to_the_log_and_to_stderr_only_when_verbose(verbose, log_file, capsys):
    shown: list[str] = []
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, *rest, **kw: shown.append(str(message))  # nlqo's own way to show them
        spy = warnings.showwarning
        with logs.routed(verbose=verbose) as route:
            assert route == logs.Route(log_file, verbose)
            emit_all()
        assert warnings.showwarning is spy
    assert (list(root.handlers), root.level) == before  # all put back
    log = log_file.read_text()
    assert CONTROL in log and "Loading SentenceTransformer model" in log
    assert "/elsewhere/torch/nn.py:7: FutureWarning: a torch deprecation" in log
    assert (
        shown == ["skipped 2 bad corpus records"] and "bad corpus records" not in log
    )  # nlqo's warning shows as before
    err = capsys.readouterr().err
    if verbose:
        assert (
            f"nlqo.llama_cpp: {CONTROL}\n" in err
            and "sentence_transformers.base.model: Loading SentenceTransformer model\n" in err
        )
        assert "FutureWarning: a torch deprecation" in err
    else:
        assert err == ""


def test_a_log_file_that_cannot_be_written_is_no_error(tmp_path, monkeypatch, capsys):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(logs.ENV, str(tmp_path / "a-file" / "nlqo.log"))
    with logs.routed() as route:
        llamacpp.LOG.warning(CONTROL)
    assert route.path is None and capsys.readouterr().err == ""


def test_the_log_lives_in_nlqos_cache_unless_named():
    assert logs.log_path({"NLQO_CACHE": "/data/cache"}) == Path("/data/cache/logs/nlqo.log")
    assert logs.log_path({"NLQO_CACHE": "/data/cache", "NLQO_LOG": "~/x.log"}) == Path.home() / "x.log"
    assert logs.log_path({}) == Path.home() / ".cache" / "nlqo" / "logs" / "nlqo.log"


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_transformers_messages_and_loading_bars_follow_the_route(verbose, log_file, capsys):
    tlog = pytest.importorskip("transformers.utils.logging")
    library = tlog.get_logger("transformers")
    before = (set(library.handlers), library.propagate)
    with logs.routed(verbose=verbose):
        logs.tame_transformers()
        tlog.get_logger("transformers.modeling_utils").warning("Some weights of the checkpoint were not used")
        for _ in tlog.tqdm(range(3), desc="Loading weights"):
            pass
    log, err = log_file.read_text(), capsys.readouterr().err
    assert "WARNING transformers.modeling_utils: Some weights of the checkpoint were not used" in log
    if verbose:
        assert "Some weights of the checkpoint were not used" in err and "Loading weights: 100%" in err
    else:
        assert "INFO tqdm: Loading weights: 100%|##########| 3/3" in log and err == ""
    assert (set(library.handlers), library.propagate) == before  # outside the route transformers prints as it did


# --- the CLI: --verbose, exit codes, no traceback ------------------------------------------------


def boom(args):
    raise RuntimeError("boom: an invariant broke")


def test_an_unexpected_exception_is_one_line_and_exit_70_with_the_traceback_in_the_log(log_file, monkeypatch, capsys):
    monkeypatch.setattr("nlqo.cli.parse.run", boom)
    assert main(["parse", "Who wrote The Hobbit?"]) == 70
    err = capsys.readouterr().err
    assert (
        err
        == f"nlqo: internal error: RuntimeError: boom: an invariant broke (the traceback is in {log_file}; please report it)\n"
    )
    log = log_file.read_text()
    assert "ERROR nlqo.cli: internal error in: nlqo parse 'Who wrote The Hobbit?'" in log
    assert "Traceback (most recent call last)" in log and 'raise RuntimeError("boom: an invariant broke")' in log


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_before_or_after_the_command_also_prints_the_traceback(where, log_file, monkeypatch, capsys):
    monkeypatch.setattr("nlqo.cli.parse.run", boom)
    argv = ["--verbose", "parse", "q?"] if where == "before" else ["parse", "q?", "--verbose"]
    assert main(argv) == 70
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and 'raise RuntimeError("boom: an invariant broke")' in err
    assert err.endswith(
        f"nlqo: internal error: RuntimeError: boom: an invariant broke (the traceback is in {log_file}; please report it)\n"
    )


def test_plans_own_verbose_is_the_global_one_too(capsys):
    assert main(["plan", str(OLDER), "--cost-model", "structural"]) == 0
    assert "Relations:" not in capsys.readouterr().out
    for argv in (["--verbose", "plan", str(OLDER)], ["plan", str(OLDER), "-v"]):
        assert main([*argv, "--cost-model", "structural"]) == 0
        assert "Relations:" in capsys.readouterr().out


RAISE = """
import sys
import nlqo.cli.parse
from nlqo.errors import NlqoError

def run(args):
    {body}

nlqo.cli.parse.run = run
from nlqo.cli import main
sys.exit(main(["parse", "q?"]))
"""


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ("return 0", 0, ""),
        ("raise NlqoError('no such index: idx')", 2, "nlqo: error: no such index: idx\n"),
        (
            "raise ValueError('an invariant broke')",
            70,
            "nlqo: internal error: ValueError: an invariant broke (the traceback is in {log}; please report it)\n",
        ),
        ("raise KeyboardInterrupt", 130, "nlqo: interrupted\n"),
        ("raise BrokenPipeError", 141, ""),
    ],
    ids=["ok", "error", "internal", "interrupted", "broken-pipe"],
)
def test_each_exit_code_of_the_help_as_a_process_sees_it(body, code, message, tmp_path):
    log = tmp_path / "nlqo.log"
    env = {**os.environ, logs.ENV: str(log)}
    done = subprocess.run(
        [sys.executable, "-c", RAISE.format(body=body)], capture_output=True, text=True, env=env, timeout=300
    )
    assert (done.returncode, done.stderr) == (code, message.format(log=log))
    assert code in EXIT_CODES


def test_the_help_lists_every_exit_code_and_the_log_file(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    helptext = capsys.readouterr().out
    assert [int(c) for c in re.findall(r"^  (\d+) +\S", helptext, re.M)] == sorted(EXIT_CODES) == [0, 2, 70, 130, 141]
    assert "$NLQO_LOG" in helptext and "--verbose" in helptext


def test_a_reader_gone_before_the_output_is_exit_141_and_silent(tmp_path):
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "nlqo.cli", "plan", str(OLDER), "--cost-model", "structural", "--format", "json"],
            stdout=write, stderr=subprocess.PIPE, text=True, env={**os.environ, logs.ENV: str(tmp_path / "nlqo.log")}, timeout=300,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


# --- the real CLI in a process -------------------------------------------------------------------


def nlqo_cli(*args: str, log: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, logs.ENV: str(log)}
    done = subprocess.run(
        [sys.executable, "-m", "nlqo.cli", *args], capture_output=True, text=True, env=env, timeout=1800
    )
    if done.returncode == 2 and "smollm2-135m" in done.stderr and "install" in done.stderr:
        unavailable(f"the real-model tests need smollm2-135m: {done.stderr.strip()}")
    assert not check or done.returncode == 0, done.stderr
    return done


def internals_in(text: str) -> list[str]:
    return [line for line in re.split(r"[\r\n]", text) if any(word in line for word in INTERNALS)]


def test_a_model_llama_cpp_cannot_load_is_one_error_line_with_what_llama_cpp_said(tmp_path):
    if importlib.util.find_spec("llama_cpp") is None:  # not imported here: its import leaves two files open
        pytest.skip("llama-cpp-python is not installed")
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 40)
    log = tmp_path / "nlqo.log"
    done = nlqo_cli("parse", "Who wrote The Hobbit?", "--model", str(bad), log=log, check=False)
    said = f"nlqo: error: llama.cpp could not load the model {bad} (a truncated, corrupt or unsupported GGUF file); llama.cpp said: llama_model_load: error loading model: "
    assert (
        done.returncode == 2 and done.stderr.startswith(said) and done.stderr.count("\n") == 1
    )  # here: unknown model architecture: ''
    assert "ERROR nlqo.llama_cpp: llama_model_load_from_file_impl: failed to load model" in log.read_text()


@pytest.mark.real_model
def test_a_real_index_and_ask_print_nothing_from_the_model_libraries_unless_verbose(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join((REPO / "examples" / "demo_corpus.jsonl").read_text().splitlines(keepends=True)[:6]))
    ir = tmp_path / "jaws.nlqo"
    ir.write_text('question "Who directed Jaws?"\nq1 = ("Jaws", "directed by", ?d)\nanswer ?d\n')
    log = tmp_path / "nlqo.log"
    index = nlqo_cli("index", str(corpus), "--out", str(tmp_path / "index"), log=log)
    assert internals_in(index.stderr) == [] and "indexed 6 passages" in index.stdout
    ask = [
        "ask",
        "Who directed Jaws?",
        "--index",
        str(tmp_path / "index"),
        "--model",
        "smollm2-135m",
        "--ir",
        str(ir),
        "--runtime",
        "llama-cpp",
    ]
    quiet = nlqo_cli(*ask, log=log)
    assert internals_in(quiet.stderr) == []
    assert "nlqo: loading smollm2-135m ..." in quiet.stderr and re.search(
        r"^  \[[\w-]+\] ", quiet.stderr, re.M
    )  # nlqo's own lines stay
    logged = log.read_text()
    assert "INFO nlqo.llama_cpp: llama_model_loader: " in logged and "nlqo.llama_cpp: load_tensors: " in logged
    assert "INFO tqdm: Loading weights: 100%" in logged  # the embedder's bar, as one line
    verbose = nlqo_cli("--verbose", *ask, log=log)
    assert "nlqo.llama_cpp: llama_model_loader: " in verbose.stderr and "Loading weights: 100%" in verbose.stderr
    assert quiet.stdout.splitlines()[0] == verbose.stdout.splitlines()[0]  # the same answer either way

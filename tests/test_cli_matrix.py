"""The CLI as a user meets it, on the bundled 135M model: every command, every operator path, every
output format, progress on and off, both runtimes (issue 37).

Each cell runs the real ``nlqo`` executable in a subprocess and checks that it exits 0, or 2 with
an ``nlqo: error:`` line; that nothing prints a traceback; that JSON parses and HTML loads in
headless Chromium with no console error. Paths a real model cannot be made to take on demand (a
question that does not parse, an empty answer) run in process with that one call of the real
model replaced.

The fast slice runs in ``make test``; cells marked ``cli_matrix`` are the full matrix, which
``make test`` runs only under ``CI=true`` or ``NLQO_FULL_MATRIX=1`` (tests/conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from nlqo.cli import main
from nlqo.errors import ParseFailure
from nlqo.kinds import Operator

pytestmark = pytest.mark.real_model
full = pytest.mark.cli_matrix

MODEL = "smollm2-135m"
PASSAGES = [
    {
        "id": "h1",
        "title": "The Hobbit",
        "text": "The Hobbit is a children's fantasy novel by J. R. R. Tolkien, published in 1937.",
    },
    {
        "id": "h2",
        "title": "J. R. R. Tolkien",
        "text": "John Ronald Reuel Tolkien was an English writer, born in Bloemfontein.",
    },
    {"id": "h3", "title": "Bloemfontein", "text": "Bloemfontein is a city in South Africa, its judicial capital."},
    {"id": "a1", "title": "Ada Lovelace", "text": "Ada Lovelace was born on 10 December 1815 in London."},
    {"id": "a2", "title": "Charles Babbage", "text": "Charles Babbage was born on 26 December 1791 in London."},
]
ONE_FACT = "Who wrote The Hobbit?"
MULTI_HOP = "In which city was the author of The Hobbit born?"
IR = {
    "one": f'question "{ONE_FACT}"\nq1 = (?author, "wrote", "The Hobbit")\nanswer ?author\n',
    "chain": f'question "{MULTI_HOP}"\nq1 = (?author, "wrote", "The Hobbit")\nq2 = (?author, "born in", ?city)\nanswer ?city\n',
    "comparison": (
        'question "Who was born first, Ada Lovelace or Charles Babbage?"\nq1 = ("Ada Lovelace", "born on", ?d1)\n'
        'q2 = ("Charles Babbage", "born on", ?d2)\nq3 = (?first, "born earlier according to", ?d1)\n'
        'q4 = (?first, "born earlier according to", ?d2)\nrelation q1 sibling q2\nrelation q3 sibling q4\nanswer ?first\n'
    ),
}
NLQO = str(Path(sys.executable).with_name("nlqo"))


@attrs.frozen
class Outcome:
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("matrix")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    questions = folder / "questions.jsonl"
    questions.write_text(
        json.dumps({"id": "q1", "question": ONE_FACT, "answers": ["J. R. R. Tolkien"]}) + "\n"
        + json.dumps({"id": "q2", "question": MULTI_HOP, "answers": ["Bloemfontein"]}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    out = {"folder": folder, "corpus": corpus, "questions": questions, "index": folder / "index"}
    for name, text in IR.items():
        out[name] = folder / f"{name}.nlqo"
        out[name].write_text(text, encoding="utf-8")
    assert main(["index", str(corpus), "--out", str(out["index"]), "--quiet"]) == 0
    return out


def nlqo(*args: str | Path, expect: int = 0) -> Outcome:
    """Run the real ``nlqo`` executable; check the exit code and that nothing printed a traceback."""
    done = subprocess.run([NLQO, *map(str, args)], capture_output=True, text=True, timeout=900)
    outcome = Outcome(done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    assert done.returncode == expect, f"exit {done.returncode}, expected {expect}:\n{done.stderr[-3000:]}"
    if expect == 2:
        assert "nlqo: error: " in done.stderr
    return outcome


def engine_args(files, *extra: str | Path) -> list[str | Path]:
    return ["--index", files["index"], "--model", MODEL, "-k", "2", "--max-hops", "2", *extra]


def progress_shown(err: str) -> bool:
    return any(line.startswith("  [") for line in err.splitlines())


# --- the fast slice (make test) -------------------------------------------------------------


def test_a_one_fact_question_answers_with_progress_and_its_stop_line(files):
    """The crash of issue 37: auto lowers a one-atom plan to RETRIEVE, whose stop step carries no
    terminator score; the progress printer formatted it with :.2f and every such question died."""
    result = nlqo("ask", ONE_FACT, *engine_args(files, "--ir", files["one"]))
    assert "] stop (answer)" in result.err
    last = result.out.strip().splitlines()[-1]
    assert last.startswith("(auto -> retrieve; 1 hops, stop: answer;")


def test_a_one_fact_question_parsed_by_the_model_answers(files):
    result = nlqo("ask", ONE_FACT, *engine_args(files))
    assert progress_shown(result.err) and result.out.strip()


def test_explain_analyze_page_of_a_one_fact_question_loads_cleanly(files, browser):
    page = files["folder"] / "one.html"
    nlqo("explain", ONE_FACT, *engine_args(files, "--ir", files["one"], "--analyze", "--format", "html", "--out", page))
    assert_page_loads(browser, page)


# --- the full matrix ------------------------------------------------------------------------


@full
@pytest.mark.parametrize("ir", ["one", "chain", "comparison"])
@pytest.mark.parametrize("strategy", ["auto", "linear", "tree"])
@pytest.mark.parametrize("progress", [True, False])
def test_ask_every_strategy_and_plan_shape(files, ir, strategy, progress):
    quiet = () if progress else ("--quiet",)
    result = nlqo(
        "ask", IR[ir].split('"')[1], *engine_args(files, "--ir", files[ir], "--strategy", strategy, "--json", *quiet)
    )
    data = json.loads(result.out)
    assert data["strategy"] == strategy and isinstance(data["answer"], str)
    assert progress_shown(result.err) == progress
    if strategy == "linear":
        assert data["plan"] is None or data["stats"]["hops"] >= 1
    if strategy == "auto" and ir == "one":
        assert data["stats"]["retrievals"] == 1 and data["stats"]["stop_reason"] == "answer"


@full
@pytest.mark.parametrize("question", [ONE_FACT, MULTI_HOP])
def test_ask_text_output_ends_with_the_operator_line(files, question):
    result = nlqo("ask", question, *engine_args(files))
    last = result.out.strip().splitlines()[-1]
    assert last.startswith("(auto -> ") and any(f"-> {op};" in last for op in Operator.values())


@full
@pytest.mark.parametrize("fmt", ["text", "json", "dot", "html"])
@pytest.mark.parametrize("analyze", [True, False])
def test_explain_every_format(files, fmt, analyze, browser):
    out = files["folder"] / f"explain-{fmt}-{analyze}.out"
    nlqo(
        "explain",
        MULTI_HOP,
        *engine_args(files, "--ir", files["chain"], "--format", fmt, "--out", out, *(["--analyze"] if analyze else [])),
    )
    check_format(fmt, out, browser)


@full
@pytest.mark.parametrize("fmt", ["text", "json", "dot", "html"])
def test_plan_every_format(files, fmt, browser):
    out = files["folder"] / f"plan-{fmt}.out"
    nlqo("plan", files["comparison"], "--format", fmt, "--out", out)
    check_format(fmt, out, browser)


@full
def test_parse_retrieve_models_and_bench(files):
    assert "answer ?" in nlqo("parse", MULTI_HOP, "--model", MODEL).out
    hits = json.loads(nlqo("retrieve", "--index", files["index"], "Tolkien", "-k", "2", "--format", "json").out)
    assert len(hits["hits"]) == 2 and hits["k"] == 2
    assert MODEL in nlqo("models").out
    out = files["folder"] / "bench"
    nlqo(
        "bench",
        "--questions",
        files["questions"],
        "--index",
        files["index"],
        "--model",
        MODEL,
        "--strategies",
        "standard-rag,auto",
        "--out",
        out,
        "--quiet",
    )
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted((r["qid"], r["strategy"]) for r in records) == [
        ("q1", "auto"),
        ("q1", "standard-rag"),
        ("q2", "auto"),
        ("q2", "standard-rag"),
    ]


@full
def test_the_transformers_runtime_answers_too(files):
    result = nlqo("ask", ONE_FACT, *engine_args(files, "--ir", files["one"], "--runtime", "transformers", "--json"))
    assert json.loads(result.out)["stats"]["stop_reason"] == "answer"


@full
@pytest.mark.parametrize(
    "args",
    [
        ("ask", "", "--index", "{index}", "--model", MODEL),
        ("ask", "x" * 100_000, "--index", "{index}", "--model", MODEL),
        ("ask", ONE_FACT, "--index", "{folder}/missing", "--model", MODEL),
        ("ask", ONE_FACT, "--index", "{index}", "--model", "no-such-model"),
        ("ask", ONE_FACT, "--index", "{index}", "--model", MODEL, "--ir", "{corpus}"),
        ("plan", "{corpus}"),
        ("index", "{folder}/missing.jsonl", "--out", "{folder}/x"),
    ],
    ids=[
        "empty-question",
        "100kB-question",
        "no-index",
        "unknown-model",
        "bad-ir",
        "plan-bad-ir",
        "index-missing-corpus",
    ],
)
def test_errors_exit_2_with_one_message(files, args):
    result = nlqo(*(a.format(**{k: str(v) for k, v in files.items()}) for a in args), expect=2)
    assert len([line for line in result.err.splitlines() if line.startswith("nlqo: error: ")]) == 1


# --- paths the real model takes only when one call is replaced (in process) -----------------


@full
def test_a_question_that_does_not_parse_runs_without_a_plan(files, monkeypatch, capsys):
    def fails(question, llm, config):
        raise ParseFailure("no valid IR after 3 attempts", attempts=(), errors=())

    monkeypatch.setattr("nlqo.main.engine.parse_configured", fails)
    assert main(["ask", MULTI_HOP, *map(str, engine_args(files, "--json", "--policy", "structural"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stats"]["stop_reason"].startswith("parse_failed") and data["plan"] is None


@full
def test_an_empty_answer_is_asked_again(files, monkeypatch, capsys):
    import nlqo.main.builder as builder

    real = builder.load_model

    def first_reply_empty(config, **options):
        return FirstEmpty(real(config, **options))

    monkeypatch.setattr(builder, "load_model", first_reply_empty)
    assert main(["ask", ONE_FACT, *map(str, engine_args(files, "--ir", files["one"], "--json", "--quiet"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert any(step["node"] == "fallback" for step in data["trace"]), [s["node"] for s in data["trace"]]


class FirstEmpty:
    """The real model, but its first chat reply after the cost probes is empty."""

    def __init__(self, inner):
        self.inner, self.replied = inner, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def chat(self, messages, **kw):
        done = self.inner.chat(messages, **kw)
        if not self.replied:
            self.replied = True
            return attrs.evolve(done, text="")
        return done


# --- helpers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    from browser import CHROMIUM, Chromium
    from realmodels import unavailable

    if CHROMIUM is None:
        unavailable("chromium is not installed (Debian: apt-get install chromium; `make install-test` tries)")
    with Chromium() as chromium:
        yield chromium.page


def check_format(fmt: str, path: Path, browser) -> None:
    text = path.read_text(encoding="utf-8")
    if fmt == "json":
        assert isinstance(json.loads(text), dict)
    elif fmt == "dot":
        assert text.lstrip().startswith("digraph")
    elif fmt == "html":
        page = path.with_suffix(".html")
        page.write_text(text, encoding="utf-8")
        assert_page_loads(browser, page)
    else:
        assert text.strip()


def assert_page_loads(page, path: Path) -> None:
    page.open(path.as_uri())
    assert page.errors() == []
    assert page.eval("document.querySelectorAll('#tree .node').length") > 0

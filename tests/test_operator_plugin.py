"""Adding an operator is one module plus one registration (issue 51): docs/architecture.md's walk-through,
its closed-book module and entry point taken as written there, installed as a package on PYTHONPATH
(with a scripted backend under ``nlqo.backends``); the real CLI, in subprocesses, runs the operator
by name (ask, explain, analyze, bench, serve) and ``auto`` weighs it, measured or not. No nlqo file names it."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nlqo.cli import main

pytestmark = pytest.mark.real_model  # the bundled embedder indexes and retrieves

ROOT = Path(__file__).resolve().parents[1]
MODEL = "toy:Neil Armstrong"
"""The package's scripted backend: it answers 'Neil Armstrong' to every prompt."""
BACKEND = """
from nlqo.runtime.llm.scripted import ScriptedLLM


def load(spec, **options):
    return ScriptedLLM([], default=spec, name="toy")
"""
QUESTION = "Who was the first person to walk on the Moon?"
QUESTIONS = [
    {"id": "q1", "question": QUESTION, "answers": ["Neil Armstrong"]},
    {"id": "q2", "question": "Which band recorded Abbey Road?", "answers": ["The Beatles"]},
]


def walkthrough() -> tuple[str, dict[str, str]]:
    """docs/architecture.md's walk-through as written: the module, and its entry points (name -> object)."""
    section = (ROOT / "docs" / "architecture.md").read_text().split("## Adding an operator", 1)[1].split("\n## ")[0]
    module, toml = (textwrap.dedent(re.findall(rf"```{lang}\n(.*?)\n *```", section, re.S)[0]) for lang in ("python", "toml"))  # fmt: skip
    return module, dict(re.findall(r'^([\w-]+) = "(.+)"$', toml, re.M))


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    """The installed package (a dist-info folder beside it), an index of six demo passages, two questions."""
    tmp = tmp_path_factory.mktemp("plugin")
    module, registered = walkthrough()
    assert registered == {"closed-book": "mypkg.closed_book:CLOSED_BOOK"}
    (tmp / "mypkg").mkdir()
    (tmp / "mypkg" / "__init__.py").write_text("")
    (tmp / "mypkg" / "closed_book.py").write_text(module)
    (tmp / "mypkg" / "backend.py").write_text(BACKEND)
    info = tmp / "mypkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    points = "".join(f"{name} = {target}\n" for name, target in registered.items())
    (info / "entry_points.txt").write_text(f"[nlqo.operators]\n{points}\n[nlqo.backends]\ntoy = mypkg.backend:load\n")
    titles = {"Apollo 11", "Neil Armstrong", "Purdue University", "Abbey Road", "The Beatles", "Liverpool"}
    lines = (ROOT / "examples" / "demo_corpus.jsonl").read_text().splitlines()
    (tmp / "corpus.jsonl").write_text("\n".join(line for line in lines if json.loads(line)["title"] in titles))
    (tmp / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    assert main(["index", str(tmp / "corpus.jsonl"), "--out", str(tmp / "index"), "--quiet"]) == 0
    return {"tmp": tmp, "index": tmp / "index", "questions": tmp / "questions.jsonl"}


def run(setup, *args: str, **options) -> subprocess.CompletedProcess | subprocess.Popen:
    """The real CLI with the package on PYTHONPATH: run to its end (``popen``: started and returned)."""
    path = os.pathsep.join(filter(None, (str(setup["tmp"]), os.environ.get("PYTHONPATH"))))
    argv, env = [sys.executable, "-m", "nlqo", *args], {**os.environ, "PYTHONPATH": path}
    if options.pop("popen", False):
        return subprocess.Popen(argv, env=env, text=True, **options)
    return subprocess.run(argv, env=env, text=True, capture_output=True, timeout=600)


def nlqo(setup, *args: str) -> str:
    """Standard output of a command that must succeed, on the index and the scripted model."""
    if args[0] in ("ask", "explain", "analyze", "bench"):
        args += ("--index", str(setup["index"]), "--model", MODEL, "--quiet")
    done = run(setup, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_ask_runs_the_registered_operator_by_name(setup):
    result = json.loads(nlqo(setup, "ask", QUESTION, "--strategy", "closed-book", "--json"))
    assert (result["answer"], result["strategy"], result["operator"]) == (
        "Neil Armstrong",
        "closed-book",
        "closed-book",
    )
    assert [(s["node"], s["kind"]) for s in result["trace"]] == [("answer", "llm"), ("answer", "stop")]


def test_explain_shows_its_label_annotation_and_estimate_without_parsing(setup):
    out = nlqo(setup, "explain", QUESTION, "--strategy", "closed-book")
    assert "Physical plan: ClosedBook (no retrieval)\n  chosen: forced by --strategy closed-book" in out
    assert "ClosedBook: one answer, no retrieval" in out and "(the question was not parsed" in out
    assert "structural estimate closed-book: " in out and "1 LLM calls, 8 generated, 120 prompt tokens computed" in out


def test_auto_weighs_it_unmeasured_then_analyze_measures_it_and_auto_chooses_by_that(setup):
    physical = json.loads(nlqo(setup, "explain", QUESTION, "--format", "json"))["physical"]
    candidates = {c["operator"]: c for c in physical["choice"]["candidates"]}
    assert set(candidates) == {"linear", "tree", "retrieve", "iterate", "cascade", "closed-book"}
    unmeasured = candidates["closed-book"]
    assert unmeasured["n"] == 0 and unmeasured["basis"].startswith("no statistics, EM unknown: structural estimate")
    assert unmeasured["seconds"] == physical["estimates"]["closed-book"]["ms"] / 1000
    assert physical["operator"] != "closed-book"  # the fastest, but no EM estimate: below every measured one

    stats = setup["tmp"] / "statistics.json"
    records = ("--records", str(setup["tmp"] / "analyze"), "--sample", "2", "--questions", str(setup["questions"]))
    nlqo(setup, "analyze", "--operators", "retrieve,closed-book", "--out", str(stats), *records)
    measured = {op: (s["all"]["n"], s["all"]["em"]) for op, s in json.loads(stats.read_text())["operators"].items()}
    assert measured == {"retrieve": (2, 0.5), "closed-book": (2, 0.5)}
    physical = json.loads(nlqo(setup, "explain", QUESTION, "--format", "json", "--statistics", str(stats)))["physical"]
    assert {(c["operator"], c["n"]) for c in physical["choice"]["candidates"]} == {("retrieve", 2), ("closed-book", 2)}
    assert physical["operator"] == "closed-book"  # as good as retrieve on the sample, and faster


def test_bench_runs_it_beside_a_baseline(setup):
    out = setup["tmp"] / "bench"
    nlqo(setup, "bench", "--questions", str(setup["questions"]), "--strategies", "closed-book,standard-rag", "--out", str(out))  # fmt: skip
    results = json.loads((out / "summary.json").read_text())["results"]
    assert {s: r["em"] for s, r in results.items()} == {"closed-book": 0.5, "standard-rag": 0.5}
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    answers = {(r["qid"], r["answer"], r["operator"]) for r in records if r["strategy"] == "closed-book"}
    assert answers == {("q1", "Neil Armstrong", "closed-book"), ("q2", "Neil Armstrong", "closed-book")}


def test_serve_answers_with_it_and_lists_it(setup):
    argv = ("serve", "--index", str(setup["index"]), "--model", MODEL, "--port", "0")
    server = run(setup, *argv, popen=True, stderr=subprocess.PIPE)
    try:
        address = next(m for line in server.stderr if (m := re.search(r"serving on http://([\d.]+):(\d+)", line)))
        client = http.client.HTTPConnection(address[1], int(address[2]), timeout=60)

        def ask(strategy: str) -> tuple[int, dict]:
            body = json.dumps({"question": QUESTION, "strategy": strategy})
            client.request("POST", "/v1/ask", body, {"Content-Type": "application/json"})
            reply = client.getresponse()
            return reply.status, json.loads(reply.read())

        status, answer = ask("closed-book")
        assert (status, answer["answer"], answer["operator"], answer["stats"]["retrievals"]) == (
            200, "Neil Armstrong", "closed-book", 0
        )  # fmt: skip
        status, error = ask("closed-bok")
        assert status == 400 and error["error"]["message"].endswith("iterate, cascade, closed-book")
    finally:
        server.terminate()
        server.wait(30)

"""``nlqo analyze`` end to end on the 135M model: measure, then ask and explain by the statistics;
a killed analyze resumes with nothing lost or doubled; statistics of another setup are refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nlqo.cli import main

pytestmark = pytest.mark.real_model

MODEL = "smollm2-135m"
PASSAGES = [
    {"id": "h1", "title": "The Hobbit", "text": "The Hobbit is a fantasy novel by J. R. R. Tolkien."},
    {"id": "h2", "title": "J. R. R. Tolkien", "text": "J. R. R. Tolkien was born in Bloemfontein."},
    {"id": "a1", "title": "Ada Lovelace", "text": "Ada Lovelace was born in London in 1815."},
]
QUESTIONS = [
    {"id": "q1", "question": "Who wrote The Hobbit?", "answers": ["J. R. R. Tolkien"]},
    {"id": "q2", "question": "Where was Tolkien born?", "answers": ["Bloemfontein"]},
    {"id": "q3", "question": "In which year was Ada Lovelace born?", "answers": ["1815"]},
]


@pytest.fixture
def setup(tmp_path) -> dict[str, Path]:
    corpus, questions = tmp_path / "corpus.jsonl", tmp_path / "questions.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    assert main(["index", str(corpus), "--out", str(tmp_path / "index"), "--quiet"]) == 0
    return {"index": tmp_path / "index", "questions": questions}


def analyze(setup, *extra: str) -> list[str]:
    return [
        "analyze",
        "--index",
        str(setup["index"]),
        "--questions",
        str(setup["questions"]),
        "--model",
        MODEL,
        "--quiet",
        *extra,
    ]


def test_analyze_then_ask_and_explain_choose_by_the_statistics(setup, capsys):
    assert main(analyze(setup, "--sample", "2", "--operators", "retrieve,iterate")) == 0
    stats = json.loads((setup["index"] / "statistics.json").read_text())
    assert stats["measured_on"]["model"] == MODEL and stats["measured_on"]["k"] == 3
    assert {op: s["all"]["n"] for op, s in stats["operators"].items()} == {"retrieve": 2, "iterate": 2}
    assert stats["sample"]["ids"] == ["q1", "q2"]
    capsys.readouterr()
    assert (
        main(
            [
                "explain",
                "Who wrote The Hobbit?",
                "--index",
                str(setup["index"]),
                "--model",
                MODEL,
                "--analyze",
                "--format",
                "json",
                "--quiet",
            ]
        )
        == 0
    )
    physical = json.loads(capsys.readouterr().out)["physical"]
    choice = physical["choice"]
    assert choice["statistics"].startswith(str(setup["index"] / "statistics.json"))
    assert {c["operator"] for c in choice["candidates"]} == {"retrieve", "iterate"} and physical["operator"] == choice[
        "operator"
    ]
    assert choice["skipped"].startswith("no parse") and choice["q_error"] >= 1
    assert (
        main(["ask", "Who wrote The Hobbit?", "--index", str(setup["index"]), "--model", MODEL, "--json", "--quiet"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["strategy"] == "auto"


def test_statistics_of_another_setup_are_refused_with_the_difference_and_the_fix(setup, capsys):
    assert main(analyze(setup, "--sample", "1", "--operators", "retrieve")) == 0
    capsys.readouterr()
    assert (
        main(["ask", "Who wrote The Hobbit?", "--index", str(setup["index"]), "--model", MODEL, "-k", "2", "--quiet"])
        == 2
    )
    err = capsys.readouterr().err
    assert "measured with k 3, not 2" in err and "nlqo analyze --index DIR --questions FILE" in err
    # a forced operator does not choose by statistics, so nothing is refused
    assert (
        main(
            [
                "ask",
                "Who wrote The Hobbit?",
                "--index",
                str(setup["index"]),
                "--model",
                MODEL,
                "-k",
                "2",
                "--strategy",
                "retrieve",
                "--quiet",
            ]
        )
        == 0
    )


def test_a_killed_analyze_resumes_with_every_run_once(setup):
    records = setup["index"] / "analyze" / "records.jsonl"
    argv = [sys.executable, "-m", "nlqo", *analyze(setup, "--sample", "3", "--operators", "retrieve,iterate")]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while process.poll() is None and not (records.is_file() and records.read_text().count("\n") >= 2):
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    before = records.read_text().count("\n")
    assert 2 <= before < 6, "the kill came after the run finished: nothing was resumed"
    assert main(analyze(setup, "--sample", "3", "--operators", "retrieve,iterate")) == 0
    runs = [(r["qid"], r["strategy"]) for r in map(json.loads, records.read_text().splitlines())]
    assert sorted(runs) == sorted((q["id"], op) for q in QUESTIONS for op in ("retrieve", "iterate"))
    stats = json.loads((setup["index"] / "statistics.json").read_text())
    assert stats["operators"]["retrieve"]["all"]["n"] == stats["operators"]["iterate"]["all"]["n"] == 3

"""The Makefile's benchmark targets, dry-run (`make -n` runs nothing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(target: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-n", target, "VENV=/nonexistent-venv"], cwd=ROOT, capture_output=True, text=True)


def test_each_ablation_runs_its_flags_into_its_own_folder():
    plan = dry_run("ablation-tau")
    assert plan.returncode == 0, plan.stderr
    assert "--tau 0.8,0.85,0.9" in plan.stdout and "--out benchmarks/results/ablations-llamacpp/tau" in plan.stdout


def test_an_experiment_may_name_its_own_set_and_size():
    plan = dry_run("ablation-timing")
    assert plan.returncode == 0, plan.stderr
    assert "musique_dev_200.jsonl.gz" in plan.stdout and "musique_dev_200_corpus.jsonl.gz" in plan.stdout
    assert "--limit 40" in plan.stdout and "--strategies iter-retgen,ircot,auto" in plan.stdout
    others = dry_run("ablation-tau").stdout
    assert "hotpotqa_dev_199.jsonl.gz" in others and "--limit 20" in others


def test_an_unknown_ablation_is_refused_with_the_known_names():
    plan = dry_run("ablation-taux")
    assert plan.returncode != 0
    assert "unknown ablation 'taux'" in plan.stderr and "relation-cache" in plan.stderr
    assert "nlqo bench" not in plan.stdout


def test_the_report_lists_the_runs_in_data_set_order():
    plan = dry_run("bench-report")
    assert plan.returncode == 0, plan.stderr
    folders = plan.stdout.split("--report", 1)[1].split()
    runs = [f"benchmarks/results/runs/{name}" for name in ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")]
    assert [f for f in folders if f in runs] == [r for r in runs if (ROOT / r).is_dir()]


@pytest.mark.parametrize("target", ["bench-hotpotqa_dev_199", "ablation-tau", "ablation-plan-hints", "demo"])
def test_no_target_runs_the_lossy_int8_path_or_pins_one_thread(target):
    plan = dry_run(target)
    assert plan.returncode == 0, plan.stderr
    assert "nlqo" in plan.stdout
    assert "--quantize" not in plan.stdout and "--threads 1" not in plan.stdout


def test_the_test_setup_installs_chromium_for_the_page_tests_and_tolerates_failure():
    plan = dry_run("install-test")
    assert plan.returncode == 0, plan.stderr
    line = next(line for line in plan.stdout.splitlines() if "chromium" in line)
    assert "apt-get install -y -qq chromium chromium-driver" in line and "browser tests will be skipped" in line


def test_make_test_runs_ruff_format_and_mypy_before_pytest():
    plan = dry_run("test")
    assert plan.returncode == 0, plan.stderr
    steps = [line for line in plan.stdout.splitlines() if "-m ruff" in line or "-m mypy" in line or "-m pytest" in line]
    assert [s.split(" -m ")[1].split()[0] for s in steps] == ["ruff", "ruff", "mypy", "pytest"]
    assert "ruff format --check" in steps[1]


def test_the_demo_question_is_in_no_prompt_and_its_answer_is_in_the_demo_corpus():
    """A demo whose question or answer is in a prompt's demonstration proves nothing: the model could copy it."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("QUESTION ?="))
    question = line.split("?=", 1)[1].strip()
    assert f'nlqo ask "{question}"' in (ROOT / "README.md").read_text()
    prompts = "\n".join(p.read_text() for p in (ROOT / "nlqo" / "prompts").glob("*.py"))
    names = [w.strip("?") for w in question.split()[1:] if w[0].isupper()]  # the entities the question names
    assert names == ["The", "Hobbit"]
    for text in ("Hobbit", "Tolkien", "Bloemfontein", question):
        assert text not in prompts, f"{text!r} is in a prompt"
    corpus = (ROOT / "examples" / "demo_corpus.jsonl").read_text()
    assert "The Hobbit is a children's fantasy novel by the English author J. R. R. Tolkien" in corpus
    assert "He was born in Bloemfontein" in corpus


def test_the_benchmark_runs_the_five_claimed_strategies_on_200_and_the_other_baselines_on_100():
    main = dry_run("bench-2wiki_dev_300")
    baselines = dry_run("bench-baselines-2wiki_dev_300")
    assert main.returncode == 0 and baselines.returncode == 0, main.stderr + baselines.stderr
    assert "--limit 200 --strategies standard-rag,iter-retgen,linear,tree,auto" in main.stdout
    assert "--out benchmarks/results/runs/2wiki_dev_300 " in main.stdout
    assert "--limit 100 --strategies no-rag,ircot,self-ask" in baselines.stdout
    assert "--out benchmarks/results/runs/2wiki_dev_300-baselines " in baselines.stdout


def test_the_staged_benchmark_skips_runs_that_have_their_stage_and_grows_the_rest(tmp_path):
    """A real `make bench-staged` with `nlqo` replaced by a script that logs its arguments."""
    import gzip
    import json
    import sys

    venv, data, out, log = tmp_path / "venv", tmp_path / "data", tmp_path / "runs", tmp_path / "calls"
    venv.mkdir()
    data.mkdir()
    (venv / ".base").touch()
    (venv / ".model-m").touch()
    fake = tmp_path / "nlqo"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    fake.chmod(0o755)

    def questions(name: str, count: int) -> None:
        rows = "".join(json.dumps({"id": f"q{i}", "question": "?", "answers": ["a"]}) + "\n" for i in range(count))
        with gzip.open(data / f"{name}.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write(rows)

    def records(folder: str, strategies: tuple[str, ...], questions: int) -> None:
        (out / folder).mkdir(parents=True)
        rows = [{"qid": f"q{i}", "strategy": s} for i in range(questions) for s in strategies]
        rows.append({"qid": "q99", "strategy": strategies[0]})  # a question only one strategy finished
        (out / folder / "records.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows) + '{"qid": "q9', encoding="utf-8"
        )

    questions("a", 5)
    questions("b", 5)
    questions("c", 1)
    records("a", ("linear", "auto"), 2)  # has stage 2: skipped
    records("b", ("linear", "auto"), 1)  # grows
    records("c", ("linear", "auto"), 1)  # its one question is all stage 2 can have: skipped
    records("a-baselines", ("ircot",), 1)  # BASELINE_LIMIT 1: skipped
    records("c-baselines", ("ircot",), 1)
    run = subprocess.run(
        ["make", "bench-staged", f"VENV={venv}", "MODEL=m", f"NLQO={fake}", f"PY={sys.executable}", f"BENCH_OUT={out}",
         f"BENCH_DATA={data}", "BENCH_SETS=a b c", "BENCH_STAGES=2", "BASELINE_LIMIT=1"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    grown = [c.split("--out ", 1)[1].split()[0] for c in calls if "--questions" in c]
    assert grown == [f"{out}/b", f"{out}/b-baselines"]
    assert "--limit 2" in calls[0] and "--limit 1" in calls[1]
    assert calls[-1].startswith("bench --report")


def test_finished_counts_the_questions_of_a_stage_still_to_run(tmp_path):
    import gzip
    import json
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from finished import first_question_ids

    path = tmp_path / "q.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("".join(json.dumps({"id": i}) + "\n\n" for i in range(3)))
    assert first_question_ids(path, 2) == ["0", "1"]
    assert first_question_ids(path, 200) == ["0", "1", "2"]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "records.jsonl").write_text('{"qid": "1", "strategy": "s"}\n', encoding="utf-8")
    left = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "finished.py"), str(tmp_path / "run"), str(path), "200"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert left.stdout == "2\n"
    (tmp_path / "bad.jsonl").write_text('{"id": 1}\nnot json\n', encoding="utf-8")
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "finished.py"), str(tmp_path / "run"), str(tmp_path / "bad.jsonl"), "5"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert f"cannot read the question ids of {tmp_path / 'bad.jsonl'}" in bad.stderr

"""The bench loop: interleaving, resume after an interruption, outputs, report, CLI; one real run."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nlqo.cli import build_parser, main
from nlqo.cli.bench import command_line, expand_ablations
from nlqo.errors import ConfigError, LLMError, ModelNotAvailable
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.records import read_records
from nlqo.eval.report import write_report
from nlqo.eval.runner import Bench, interleave, refresh
from nlqo.runtime.llm.scripted import ScriptedLLM
from nlqo.common.passages import Hit, Passage
from nlqo.execution.operators.tree import executor as tree_executor
from nlqo.eval.strategy import build_strategy

GOLD = {"0": "Rush", "1": "Spurs", "2": "1974", "3": "Murcia", "4": "Cymbeline"}
NAMES = ["no-rag", "standard-rag", "ircot", "self-ask"]
TIMING = ("planning_s", "execution_s")


def reply(prompt: str) -> str:
    """A deterministic model: RAG prompts get the gold answer on even questions; no-rag never does."""
    qid = re.findall(r"Question: Q(\d)", prompt)[-1]
    gold = GOLD[qid]
    if prompt.endswith("Thought:"):
        return f" So the answer is: {gold}."
    if "Are follow up questions needed here: Yes." in prompt:
        return f"So the final answer is: {gold}\n#"
    if "Doc 1(" in prompt:
        return gold if int(qid) % 2 == 0 else "wrong"
    return "unknown"


class FakeRetriever:
    def search(self, query: str, k: int = 3) -> list[Hit]:
        qid = (re.findall(r"Q(\d)", query) or ["0"])[0]
        return [Hit(Passage(f"{qid}-{r}", f"Title {qid}-{r}", "text"), 1 / r, r) for r in range(1, k + 1)]


def make_strategies(names=NAMES):
    llm = ScriptedLLM([], default=reply)
    return {name: build_strategy(name, llm, FakeRetriever(), k=2) for name in names}


def tick_clock():
    counter = itertools.count()
    return lambda: float(next(counter))


@pytest.fixture
def questions(tmp_path) -> QuestionSet:
    path = tmp_path / "toy.jsonl"
    rows = [
        {"id": q, "question": f"Q{q}: which?", "answers": [a], "supporting_titles": [f"Title {q}-1", f"Title {q}-3"]}
        for q, a in GOLD.items()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return QuestionSet.load(path)


def bench(questions, out, strategies=None, **kw) -> Bench:
    kw.setdefault("clock", tick_clock())
    return Bench(
        questions, strategies or make_strategies(), out, meta={"model": "scripted", "k": 2}, progress=False, **kw
    )


def interrupted_run(questions, out, *, after: int) -> None:
    """A bench run killed (KeyboardInterrupt) when its run number ``after`` starts."""
    budget = itertools.count()

    @attrs.define(eq=False)
    class Interrupting:
        inner: object
        name: str

        def run(self, question, trace=None):
            if next(budget) == after:
                raise KeyboardInterrupt
            return self.inner.run(question, trace)

    with pytest.raises(KeyboardInterrupt):
        bench(questions, out, {n: Interrupting(s, n) for n, s in make_strategies().items()}).run()


def comparable(summary: dict) -> dict:
    """A summary without its run metadata and the strategies' own wall-clock split."""
    out = {k: v for k, v in summary.items() if k != "meta"}
    out["results"] = {n: {k: v for k, v in r.items() if k not in TIMING} for n, r in summary["results"].items()}
    return out


def test_interleaving_rotates_the_strategy_order_per_question(questions, tmp_path):
    bench(questions, tmp_path / "run").run()
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert [(r["index"], r["strategy"]) for r in records] == interleave(5, NAMES)
    firsts = [r["strategy"] for r in records[:: len(NAMES)]]
    assert firsts == ["no-rag", "standard-rag", "ircot", "self-ask", "no-rag"]
    assert interleave(2, ["a"]) == [(0, "a"), (1, "a")] and interleave(0, ["a", "b"]) == []


@given(st.integers(0, 12), st.lists(st.text(min_size=1, max_size=3), min_size=1, max_size=6, unique=True))
def test_interleaving_runs_every_pair_once_each_question_a_rotation_of_the_strategies(n, names):
    pairs = interleave(n, names)
    assert sorted(pairs) == sorted((i, name) for i in range(n) for name in names)
    for i in range(n):
        block = pairs[i * len(names) : (i + 1) * len(names)]
        assert {q for q, _ in block} == {i}
        order = [name for _, name in block]
        shift = order.index(names[0])
        assert order[shift:] + order[:shift] == list(names)  # the same cyclic order, rotated


def test_summary_values(questions, tmp_path):
    summary = bench(questions, tmp_path / "run").run()
    res = summary["results"]
    assert (summary["n"], summary["pending"], summary["questions"]) == (5, 0, 5)
    assert [res[n]["em"] for n in NAMES] == [0.0, 0.6, 1.0, 1.0]  # standard-rag right on questions 0, 2, 4
    assert res["standard-rag"]["seconds"] == 1.0  # one tick of the fake clock per run
    assert (res["standard-rag"]["hops"], res["no-rag"]["hops"], res["self-ask"]["hops"]) == (1.0, 0.0, 1.0)
    assert res["standard-rag"]["evidence_share"] == 0.5 and res["standard-rag"]["evidence_complete"] == 0.0
    assert res["no-rag"]["evidence_share"] == 0.0
    diff = next(d for d in summary["em_differences"] if (d["a"], d["b"]) == ("no-rag", "standard-rag"))
    assert diff["diff"] == pytest.approx(-0.6) and diff["low"] <= -0.2 and diff["high"] <= 0.0
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == summary


def test_resume_after_an_interrupted_run_gives_the_same_summary(questions, tmp_path):
    full = bench(questions, tmp_path / "full").run()

    interrupted_run(questions, tmp_path / "part", after=7)
    path = tmp_path / "part" / "records.jsonl"
    assert len(read_records(path)) == 7
    assert not (tmp_path / "part" / "summary.json").exists()
    with open(path, "a", encoding="utf-8") as fh:  # a record torn by a kill mid-write
        fh.write('{"qid": "1", "strategy": "ircot", "ans')

    resumed = bench(questions, tmp_path / "part").run()
    records = read_records(path)
    assert len(records) == 20 and len({(r["qid"], r["strategy"]) for r in records}) == 20
    assert path.read_text().endswith("}\n")
    assert comparable(resumed) == comparable(full)
    assert len(json.loads((tmp_path / "part" / "run.json").read_text())["resumed"]) == 1

    again = bench(questions, tmp_path / "part").run()  # nothing left to run
    assert len(read_records(path)) == 20 and comparable(again) == comparable(full)


def test_growing_the_limit_runs_only_the_new_questions(questions, tmp_path):
    first = QuestionSet.load(questions.path, limit=2)
    assert bench(first, tmp_path / "run").run()["n"] == 2
    summary = bench(questions, tmp_path / "run").run()
    assert summary["n"] == 5 and len(read_records(tmp_path / "run" / "records.jsonl")) == 20


def test_a_run_of_another_setup_is_not_resumed(questions, tmp_path):
    bench(questions, tmp_path / "run").run()
    other = Bench(questions, make_strategies(), tmp_path / "run", meta={"model": "other", "k": 2}, progress=False)
    with pytest.raises(ConfigError, match="model='scripted', not 'other'"):
        other.run()


def test_failed_runs_are_recorded_as_wrong_answers(questions, tmp_path):
    @attrs.define(eq=False)
    class Failing:
        name: str = "failing"

        def run(self, question, trace=None):
            raise LLMError("server went away")

    strategies = {**make_strategies(["standard-rag"]), "failing": Failing()}
    summary = bench(questions, tmp_path / "run", strategies).run()
    assert summary["results"]["failing"]["errors"] == 5 and summary["results"]["failing"]["em"] == 0.0
    record = read_records(tmp_path / "run" / "records.jsonl")[1]
    assert (record["strategy"], record["error"], record["stop_reason"]) == (
        "failing",
        "LLMError: server went away",
        "error",
    )


def test_joblib_threads_give_the_same_results(questions, tmp_path):
    one = comparable(bench(questions, tmp_path / "one").run())
    two = comparable(bench(questions, tmp_path / "two", jobs=2).run())
    for summary in (one, two):
        for r in summary["results"].values():
            r.pop("seconds")  # threads share the fake clock
    assert one == two


def test_outputs_table_and_plots(questions, tmp_path):
    bench(questions, tmp_path / "run").run()
    table = (tmp_path / "run" / "results.md").read_text()
    assert "| strategy | EM | F1 | Acc |" in table
    assert re.search(r"\| standard-rag \| 60\.0 \| 60\.0 \| 60\.0 \| - \| 1\.00 ", table)
    assert "| no-rag - standard-rag | -60.0 |" in table
    for name in ("em_vs_seconds.png", "tokens_per_question.png", "hops_histogram.png"):
        data = (tmp_path / "run" / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert f"]({name})" in table
    answers = (tmp_path / "run" / "answers.md").read_text().splitlines()
    head = answers[2].split(" | ")
    rows = [line.split(" | ") for line in answers[4:]]
    assert len(rows) == 5 and "[answers.md](answers.md)" in table
    column = head.index("standard-rag")
    assert sum(row[column].startswith("✓ ") for row in rows) == 3  # its EM is 60% of 5
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["dataset"] == "toy" and run["model"] == "scripted" and run["machine"]["cpus"] == os.cpu_count()


def test_report_is_generated_between_markers(questions, tmp_path):
    bench(questions, tmp_path / "toy-run").run()
    docs = tmp_path / "docs" / "benchmarks.md"
    write_report([tmp_path / "toy-run"], docs)
    text = docs.read_text()
    page = tmp_path / "docs" / "benchmarks" / tmp_path.name / "toy-run.md"
    assert text.count("<!-- BEGIN bench-report -->") == 1 and "### toy" not in text  # details on the run's page
    assert (
        f"| toy | [toy-run](benchmarks/{tmp_path.name}/toy-run.md) | 5 | no-rag, standard-rag, ircot, self-ask | scripted |"
        in text
    )
    details = page.read_text()
    assert details.startswith("# toy (toy-run): 5 questions\n") and "Targets" not in details
    assert "[answers.md](../../../toy-run/answers.md)" in details  # relative to the page
    assert (page.parent / "toy-run" / "hops_histogram.png").is_file()
    assert "![toy hops_histogram](toy-run/hops_histogram.png)" in details
    shutil.copytree(
        tmp_path / "toy-run", tmp_path / "int8" / "toy-run"
    )  # a run of the same name elsewhere keeps its own page and plots
    write_report([tmp_path / "toy-run", tmp_path / "int8" / "toy-run"], docs)
    links = re.findall(r"\[toy-run\]\((.*?)\)", docs.read_text())
    assert links == [f"benchmarks/{tmp_path.name}/toy-run.md", "benchmarks/int8/toy-run.md"]
    assert (tmp_path / "docs" / "benchmarks" / "int8" / "toy-run" / "hops_histogram.png").is_file()
    baselines = (tmp_path / "docs" / "benchmarks" / "baselines.md").read_text()
    assert "## ircot" in baselines and "So the answer is:" in baselines  # baselines documented from the code
    assert "[baselines.md](benchmarks/baselines.md)" in text
    docs.write_text(text + "\nHand-written notes stay.\n")
    write_report([tmp_path / "toy-run"], docs)
    again = docs.read_text()
    assert again.count("<!-- BEGIN bench-report -->") == 1 and again.endswith("Hand-written notes stay.\n")
    with pytest.raises(ConfigError, match="no summary.json"):
        write_report([tmp_path / "absent"], docs)


def test_the_report_plots_every_set_with_its_baselines_sibling(questions, tmp_path):
    from matplotlib.image import imread

    from nlqo.eval.report import load_run, sets_panels

    bench(questions, tmp_path / "runs" / "toy", make_strategies(["standard-rag"])).run()
    docs = tmp_path / "docs" / "benchmarks.md"
    plot = tmp_path / "docs" / "benchmarks" / "em_vs_seconds_sets.png"
    write_report([tmp_path / "runs" / "toy"], docs)
    assert not plot.exists() and "em_vs_seconds_sets" not in docs.read_text()  # no sibling, no plot
    bench(questions, tmp_path / "runs" / "toy-baselines", make_strategies(["no-rag", "ircot"])).run()
    write_report([tmp_path / "runs" / "toy", tmp_path / "runs" / "toy-baselines"], docs)
    text = docs.read_text()
    assert "![EM against seconds per question on every set](benchmarks/em_vs_seconds_sets.png)" in text
    assert imread(plot).shape[0] > 100
    # the sibling's strategies share the set's column, on their own question count
    assert "| strategy | toy (n=5) |" in text and "| ircot | 100.0 · 1.0 s (first 5) |" in text
    panels = sets_panels([load_run(tmp_path / "runs" / name) for name in ("toy", "toy-baselines")])
    assert panels == [
        (
            "toy (n=5)",
            [("standard-rag", 0.6, 1.0, 5, False), ("ircot", 1.0, 1.0, 5, True), ("no-rag", 0.0, 1.0, 5, True)],
        )
    ]


def test_the_report_summarizes_a_run_still_in_progress(questions, tmp_path):
    interrupted_run(questions, tmp_path / "part", after=7)
    docs = tmp_path / "docs" / "benchmarks.md"
    page = tmp_path / "docs" / "benchmarks" / tmp_path.name / "part.md"
    write_report([tmp_path / "part"], docs)  # no summary.json yet: made from the 7 records
    text = page.read_text()
    assert "# toy (part): 1 question\n" in text and "summarized while in progress" in text
    assert "**4 of the 5 questions are not yet finished by every strategy**" in text
    summary = json.loads((tmp_path / "part" / "summary.json").read_text())
    assert (summary["records"], summary["n"]) == (7, 1)
    assert (
        "\n4 questions not finished by every strategy are left out.\n" in (tmp_path / "part" / "results.md").read_text()
    )
    assert "finished" not in json.loads((tmp_path / "part" / "run.json").read_text())
    refresh(tmp_path / "part")  # records unchanged: summary left as it is
    assert json.loads((tmp_path / "part" / "summary.json").read_text()) == summary

    bench(questions, tmp_path / "part").run()
    write_report([tmp_path / "part"], docs)
    text = page.read_text()
    assert (
        "# toy (part): 5 questions" in text
        and "summarized while in progress" not in text
        and "not yet finished" not in text
    )

    (tmp_path / "part" / "summary.json").unlink()  # a finished run summarized again from its records
    write_report([tmp_path / "part"], docs)
    assert "summarized while in progress" not in page.read_text() and ", finished 20" in page.read_text()


def test_ablation_lists_expand_into_variants():
    specs = expand_ablations(
        "ircot,linear,tree[parallel=off]", {"tau": "0.8,0.9", "relation_cache": "on,off", "alpha": None}
    )
    assert specs == [
        "ircot",
        "linear[tau=0.8,relation_cache=on]", "linear[tau=0.8,relation_cache=off]",
        "linear[tau=0.9,relation_cache=on]", "linear[tau=0.9,relation_cache=off]",
        "tree[parallel=off,tau=0.8,relation_cache=on]", "tree[parallel=off,tau=0.8,relation_cache=off]",
        "tree[parallel=off,tau=0.9,relation_cache=on]", "tree[parallel=off,tau=0.9,relation_cache=off]",
    ]  # fmt: skip
    assert expand_ablations("auto", {}) == ["auto"]
    with pytest.raises(ConfigError, match="twice"):
        expand_ablations("ircot,ircot", {})


def test_engine_options_reach_the_engine_of_a_variant():
    from nlqo.runtime.llm import ScriptedLLM
    from nlqo.eval.strategy import build_strategy
    from tests.fakes import HashEmbedder, KeywordRetriever

    llm, retriever = ScriptedLLM([("", "x")]), KeywordRetriever([])
    specs = expand_ablations("tree", {"ir_cleanup": "off,on", "plan_hints": "off"})
    assert specs == ["tree[ir_cleanup=off,plan_hints=off]", "tree[ir_cleanup=on,plan_hints=off]"]
    built = [build_strategy(spec, llm, retriever, embedder=HashEmbedder()) for spec in specs]
    assert [(s.name, s.inner.engine.config.ir_cleanup, s.inner.engine.config.plan_hints) for s in built] == [
        (specs[0], False, False), (specs[1], True, False)]  # fmt: skip
    plain = build_strategy("tree", llm, retriever, embedder=HashEmbedder()).engine
    assert (
        plain.config.ir_cleanup,
        tree_executor(plain).guard_rewrites,
        tree_executor(plain).queries,
        plain.config.simple_plans,
    ) == (
        False,
        True,
        "substitute",
        "retrieve",
    )  # the benchmark runs' defaults
    unguarded = build_strategy("tree[guard_rewrites=off,tree_queries=rewrite]", llm, retriever, embedder=HashEmbedder())
    assert (tree_executor(unguarded.inner.engine).guard_rewrites, tree_executor(unguarded.inner.engine).queries) == (
        False,
        "rewrite",
    )


def test_cli_help_and_missing_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ("--questions", "--corpus", "--index", "--strategies", "--limit", "--out", "--model", "--seed", "--k",
                 "--embedder", "--llm-cache", "--jobs", "--tau", "--alpha", "--relation-cache", "--parallel", "--kv-reuse",
                 "--ir-cleanup", "--plan-hints", "--guard-rewrites", "--report"):  # fmt: skip
        assert flag in help_text
    assert main(["bench", "--questions", "q.jsonl", "--out", "x"]) == 2
    assert "needs --corpus or --index" in capsys.readouterr().err


def test_command_line_reproduces_the_arguments():
    argv = ["bench", "--questions", "q.jsonl", "--corpus", "c.jsonl.gz", "--limit", "50", "--out", "res", "--strategies", "ircot,auto",
            "--tau", "0.8,0.9", "--kv-reuse", "off", "--seed", "3"]  # fmt: skip
    args = build_parser().parse_args(argv)
    again = build_parser().parse_args(command_line(args, "qwen2.5-coder-1.5b")[1:])
    for key in ("questions", "corpus", "limit", "out", "strategies", "tau", "kv_reuse", "seed", "k", "retrieval"):
        assert getattr(again, key) == getattr(args, key)
    assert again.model == "qwen2.5-coder-1.5b"


CORPUS = [
    ("rush", "Rush (band)", "Rush was a Canadian rock band from Toronto. Its drummer and lyricist was Neil Peart."),
    (
        "counterparts",
        "Counterparts (album)",
        "Counterparts is the fifteenth studio album by the Canadian rock band Rush, released in 1993.",
    ),
    ("peart", "Neil Peart", "Neil Peart was a Canadian drummer inducted into the Modern Drummer Hall of Fame in 1983."),
    ("eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France, completed in 1889."),
    ("paris", "Paris", "Paris is the capital and most populous city of France."),
    ("nile", "Nile", "The Nile is a major north-flowing river in northeastern Africa."),
]


@pytest.mark.real_model
def test_tiny_real_run_end_to_end(tmp_path, capsys):
    try:
        from nlqo.cli.common import load_llm

        load_llm("smollm2-135m")
    except ModelNotAvailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true"):
            pytest.fail(f"smollm2-135m must load under CI: {exc}")
        pytest.skip(f"smollm2-135m is not installed: {exc}")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in CORPUS), encoding="utf-8"
    )
    qfile = tmp_path / "questions.jsonl"
    qs = [
        {"id": "a", "question": "Which Canadian rock band released the album Counterparts?", "answers": ["Rush"], "supporting_titles": ["Counterparts (album)"]},
        {"id": "b", "question": "In which year was the Eiffel Tower in Paris completed?", "answers": ["1889"], "supporting_titles": ["Eiffel Tower", "Paris"]},
    ]  # fmt: skip
    qfile.write_text("".join(json.dumps(q) + "\n" for q in qs), encoding="utf-8")
    out = tmp_path / "out"
    argv = ["bench", "--questions", str(qfile), "--corpus", str(corpus), "--limit", "2", "--out", str(out),
            "--model", "smollm2-135m", "--strategies", "no-rag,standard-rag", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    assert "| standard-rag |" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["n"], summary["strategies"]) == (2, ["no-rag", "standard-rag"])
    records = read_records(out / "records.jsonl")
    assert [(r["qid"], r["strategy"]) for r in records] == [
        ("a", "no-rag"),
        ("a", "standard-rag"),
        ("b", "standard-rag"),
        ("b", "no-rag"),
    ]
    by = {(r["qid"], r["strategy"]): r for r in records}
    for r in records:
        assert r["llm_calls"] == 1 and r["generated_tokens"] > 0 and r["prompt_tokens"] > r["generated_tokens"]
        assert r["error"] is None and r["seconds"] > 0
    assert by[("a", "no-rag")]["hops"] == 0 and by[("a", "no-rag")]["retrieved_titles"] == []
    rag = by[("a", "standard-rag")]
    assert rag["hops"] == 1 and len(rag["retrieved_titles"]) == 3
    assert rag["evidence_share"] == 1.0  # the album's own passage is the closest to the question
    assert rag["trace"][0]["kind"] == "retrieve" and rag["trace"][0]["text"] == qs[0]["question"]
    run = json.loads((out / "run.json").read_text())
    assert run["model"] == "smollm2-135m" and run["embedder"] == "all-minilm-l6-v2" and run["k"] == 3
    assert (out / "index" / "manifest.json").is_file() and (out / "index.source.json").is_file()
    built = (out / "index" / "manifest.json").stat().st_mtime_ns
    assert main(argv) == 0  # resumes: nothing to run, the index is reused
    assert len(read_records(out / "records.jsonl")) == 4
    assert (out / "index" / "manifest.json").stat().st_mtime_ns == built


def test_a_yes_no_question_in_an_open_set_is_scored_on_the_first_yes_or_no(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [
        {"id": "a", "question": "Are both shrubs?", "answers": ["no"]},
        {"id": "b", "question": "Is it big?", "answers": ["yes"]},
        {"id": "c", "question": "Who?", "answers": ["Rush"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    mixed = QuestionSet.load(path)
    assert mixed.kind == "open"
    llm = ScriptedLLM(
        [], default=lambda prompt: "Yes, both are." if "shrubs" in prompt or "big" in prompt else "Yes, Rush."
    )
    strategies = {"no-rag": build_strategy("no-rag", llm, FakeRetriever(), k=2)}
    Bench(
        mixed, strategies, tmp_path / "run", meta={"model": "scripted", "k": 2}, progress=False, clock=tick_clock()
    ).run()
    ems = {r["qid"]: r["em"] for r in read_records(tmp_path / "run" / "records.jsonl")}
    # gold "no" vs a wordy "Yes, ...": wrong; gold "yes": right; an open question is scored as written
    assert ems == {"a": 0.0, "b": 1.0, "c": 0.0}


def test_overview_puts_a_baselines_run_in_its_sets_column_and_keeps_lossy_runs_apart():
    from nlqo.eval.report import overview

    def run(folder: str, n: int, results: dict, quantize: str = "none") -> dict:
        return {"dataset": "d", "folder": folder, "n": n, "strategies": list(results), "meta": {"quantize": quantize},
                "results": {k: {"em": em, "seconds": 1.0} for k, em in results.items()}}  # fmt: skip

    lines = overview(
        [
            run("runs/d", 200, {"auto": 0.5}),
            run("runs/d-baselines", 100, {"ircot": 0.25}),
            run("bench/d", 50, {"ircot": 0.1}, "int8"),
        ]
    )
    assert lines[2] == "| strategy | d (n=200) | d (n=50, int8 (lossy)) |"
    assert lines[4:6] == ["| auto | 50.0 · 1.0 s | - |", "| ircot | 25.0 · 1.0 s (first 100) | 10.0 · 1.0 s |"]


def test_the_sets_plot_has_a_panel_per_set(tmp_path):
    from matplotlib.image import imread

    from nlqo.eval.plots import em_vs_seconds_sets

    points = [("standard-rag", 0.4, 10.0, 50, False), ("ircot", 0.32, 48.0, 25, True)]
    one = imread(em_vs_seconds_sets([("a (n=50)", points)], tmp_path / "one.png"))
    three = imread(em_vs_seconds_sets([("a", points), ("b", points), ("c", points[:1])], tmp_path / "three.png"))
    assert one.shape[0] == three.shape[0] and three.shape[1] > 2 * one.shape[1] - 300  # panels side by side


def test_a_second_run_on_the_same_folder_is_refused_while_the_first_writes(questions, tmp_path):
    out = tmp_path / "run"
    seen = {}

    @attrs.define(eq=False)
    class Meddling:
        """On its first question, starts a second bench on the same folder."""

        inner: object
        name: str

        def run(self, question, trace=None):
            if "error" not in seen:
                with pytest.raises(
                    ConfigError, match=f"{out} is being written by another nlqo bench \\(pid {os.getpid()}\\)"
                ):
                    bench(questions, out).run()
                seen["error"] = True
            return self.inner.run(question, trace)

    strategies = {name: Meddling(s, name) for name, s in make_strategies().items()}
    summary = bench(questions, out, strategies).run()
    assert seen == {"error": True} and summary["records"] == len(GOLD) * len(strategies)
    assert bench(questions, out).run()["records"] == summary["records"]  # the lock went with the run

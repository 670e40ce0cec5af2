"""Batch work on Dask (``--cluster``): specs, the executor contract of the bench loop, Dask kept out
of runs without a cluster, and real runs on a local cluster of 2 worker processes with the real
smollm2 model: records equal to a single-process run, and every question recorded exactly once
when a worker is killed mid-run and the run is then interrupted and resumed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from realmodels import unavailable

from nlqo.cli import main
from nlqo.errors import ConfigError
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.records import read_records
from nlqo.eval.runner import Bench
from nlqo.execution.trace import RunResult

REPO = Path(__file__).resolve().parents[1]
DASK = ("dask", "distributed")


# --- specs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["local:0", "local", "local:-1", "http://h:8786", "tcp://host", "2", "tcp://h:1/x"])
def test_bad_cluster_specs_are_refused_with_the_accepted_forms(text):
    from nlqo.runtime.cluster import ClusterSpec

    with pytest.raises(ConfigError, match=r"local:N .* tcp://HOST:PORT"):
        ClusterSpec.parse(text)


def test_jobs_and_cluster_together_are_refused(tmp_path):
    qfile = tmp_path / "q.jsonl"
    qfile.write_text(json.dumps({"id": "a", "question": "Q?", "answers": ["A"]}) + "\n")
    argv = [
        "bench",
        "--questions",
        str(qfile),
        "--index",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--cluster",
        "local:1",
        "--jobs",
        "2",
        "--quiet",
    ]
    assert main(argv) == 2


def test_a_recipe_ships_the_runs_engine_config_with_absolute_paths(tmp_path, monkeypatch):
    """Workers build the strategies from the same EngineConfig as a run in one process."""
    try:
        from nlqo.eval.cluster import Recipe, portable
    except ImportError:
        unavailable("dask.distributed is not installed (pip install 'nlqo[cluster]')")
    import pickle

    import attrs

    from nlqo.cli import build_parser
    from nlqo.cli.bench import bench_config

    monkeypatch.chdir(tmp_path)
    argv = ["bench", "--questions", "q.jsonl", "--index", "idx", "--out", "o", "--runtime", "llama-cpp", "--threads", "1",
            "--relations-cache", "relations.json", "--path", "costs", "--budget", "500"]  # fmt: skip
    config = bench_config(build_parser().parse_args(argv), "smollm2-135m")
    recipe = Recipe(portable(config), str(Path.cwd() / "idx"), "digest", ("no-rag", "auto"))
    assert pickle.loads(pickle.dumps(recipe)) == recipe
    shipped = recipe.config
    assert (shipped.model, shipped.runtime, shipped.threads, shipped.budget, shipped.cost_model) == (
        "smollm2-135m",
        "llama-cpp",
        1,
        500,
        "default",
    )
    assert shipped.relations_cache == Path.cwd() / "relations.json" and shipped.path == (str(Path.cwd() / "costs"),)
    assert attrs.evolve(shipped, relations_cache=config.relations_cache, path=config.path, index=config.index) == config
    shared = attrs.evolve(recipe, config=attrs.evolve(shipped, threads=None), host_threads=(("h", 2),))
    assert (recipe.threads_on("h"), shared.threads_on("h"), shared.threads_on("elsewhere")) == (1, 2, 1)
    assert recipe.plugin_name() != attrs.evolve(recipe, config=attrs.evolve(shipped, tau=0.5)).plugin_name()


# --- the executor contract, without Dask ---------------------------------------------------------


class Echo:
    """A strategy answering with the question's last word, no model."""

    name = "echo"

    def run(self, question, trace=None):
        return RunResult(
            question=question, answer=question.rstrip("?").split()[-1], strategy=self.name, stop_reason="answer"
        )


@pytest.fixture
def questions(tmp_path) -> QuestionSet:
    path = tmp_path / "q.jsonl"
    rows = [
        {"id": str(i), "question": f"Which is {w}?", "answers": [w if i % 2 else "other"]}
        for i, w in enumerate(["red", "blue", "green", "cyan", "pink"])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return QuestionSet.load(path)


def test_records_arriving_in_any_order_give_the_same_summary_and_pages(questions, tmp_path):
    """A cluster appends records as workers finish; the summary, table and answer pages must not
    depend on that order (same records, same files)."""
    names = {"a": Echo(), "b": Echo()}

    def shuffled(bench, todo):
        done = [[bench.run_one(i, n)] for i, n in todo]
        random.Random(7).shuffle(done)
        yield from done

    here = Bench(questions, names, tmp_path / "here", meta={"model": "echo"}, progress=False, clock=lambda: 1.0)
    there = Bench(
        questions,
        names,
        tmp_path / "there",
        meta={"model": "echo"},
        progress=False,
        clock=lambda: 1.0,
        executor=shuffled,
    )
    a, b = here.run(), there.run()
    order = lambda folder: [(r["qid"], r["strategy"]) for r in read_records(folder / "records.jsonl")]  # noqa: E731
    assert order(tmp_path / "here") != order(tmp_path / "there") and sorted(order(tmp_path / "here")) == sorted(
        order(tmp_path / "there")
    )
    assert {k: v for k, v in a.items() if k != "meta"} == {k: v for k, v in b.items() if k != "meta"}
    for name in ("results.md", "answers.md"):
        assert (tmp_path / "here" / name).read_text().split("\n", 4)[4] == (
            tmp_path / "there" / name
        ).read_text().split("\n", 4)[4]


def test_an_executor_only_gets_the_pairs_still_missing(questions, tmp_path):
    seen = []

    def executor(bench, todo):
        seen.append(list(todo))
        for i, n in todo:
            yield [bench.run_one(i, n)]

    Bench(questions, {"a": Echo()}, tmp_path, progress=False, executor=executor).run()
    Bench(questions, {"a": Echo(), "b": Echo()}, tmp_path, progress=False, executor=executor).run()
    assert seen[0] == [(i, "a") for i in range(5)]
    assert sorted(seen[1]) == [(i, "b") for i in range(5)]
    assert len(read_records(tmp_path / "records.jsonl")) == 10


# --- Dask stays out of runs without --cluster ----------------------------------------------------


def _run_python(code: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_bench_run_without_cluster_imports_no_dask(tmp_path):
    """Every command parser plus a whole bench run (records, summary, plots, pages) in a fresh process."""
    done = _run_python(
        f"""
        import json, sys
        from pathlib import Path
        from nlqo.cli import build_parser
        from nlqo.eval.datasets import QuestionSet
        from nlqo.eval.runner import Bench
        from nlqo.runtime.llm.scripted import ScriptedLLM
        from nlqo.eval.strategy import build_strategy
        build_parser()
        Path("q.jsonl").write_text(json.dumps({{"id": "a", "question": "Q?", "answers": ["A"]}}) + "\\n")
        llm = ScriptedLLM([], default=lambda prompt: "A")
        Bench(QuestionSet.load("q.jsonl"), {{"no-rag": build_strategy("no-rag", llm, None)}}, "out", progress=False).run()
        assert Path("out/summary.json").is_file()
        print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {DASK!r})))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


# --- real runs on a local cluster ----------------------------------------------------------------

PASSAGES = [
    ("p1", "Counterparts (album)", "Counterparts is the fifteenth studio album by the Canadian rock band Rush."),
    ("p2", "Eiffel Tower", "The Eiffel Tower in Paris was completed in 1889."),
    ("p3", "Nile", "The Nile is a river in northeastern Africa."),
    ("p4", "Mount Fuji", "Mount Fuji is the highest mountain in Japan."),
    ("p5", "Danube", "The Danube flows through Vienna and Budapest."),
    ("p6", "Ada Lovelace", "Ada Lovelace was born in London in 1815."),
]
QUESTIONS = [
    ("a", "Which band released the album Counterparts?", "Rush"),
    ("b", "When was the Eiffel Tower completed?", "1889"),
    ("c", "Which country is Mount Fuji in?", "Japan"),
    ("d", "Which river flows through Vienna?", "Danube"),
    ("e", "Where was Ada Lovelace born?", "London"),
    ("f", "On which continent is the Nile?", "Africa"),
]
STRATEGIES = "no-rag,standard-rag"
SAME = (
    "qid",
    "index",
    "strategy",
    "question",
    "answer",
    "em",
    "f1",
    "acc",
    "llm_calls",
    "prompt_tokens",
    "generated_tokens",
    "retrievals",
    "hops",
    "retrieved_titles",
    "stop_reason",
    "error",
)
"""Record fields a cluster run must reproduce. Not the timings, nor the computed/cached split of the
prompt tokens: each worker warms its own prefix cache on its first question."""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cluster-data")
    corpus, qfile = folder / "corpus.jsonl", folder / "questions.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in PASSAGES))
    qfile.write_text("".join(json.dumps({"id": i, "question": q, "answers": [a]}) + "\n" for i, q, a in QUESTIONS))
    return {"corpus": corpus, "questions": qfile, "folder": folder}


@pytest.fixture(scope="module")
def reference(data) -> dict[tuple[str, str], dict]:
    """A single-process run (1 LLM thread, as each worker has) of every question."""
    from realmodels import load_or_skip

    from nlqo.runtime.models import load_local

    load_or_skip(lambda: load_local("smollm2-135m", threads=1, progress=False))
    out = data["folder"] / "single"
    argv = ["bench", "--questions", str(data["questions"]), "--corpus", str(data["corpus"]), "--out", str(out),
            "--model", "smollm2-135m", "--strategies", STRATEGIES, "--threads", "1", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    return {(r["qid"], r["strategy"]): r for r in read_records(out / "records.jsonl")}


@pytest.fixture(scope="module")
def cluster():
    """A real LocalCluster: 2 worker processes on loopback, one task thread each."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        unavailable("dask.distributed is not installed (pip install 'nlqo[cluster]')")
    from nlqo.runtime.cluster import ClusterSpec, connect

    with connect(ClusterSpec(workers=2)) as connection:
        yield connection


def _same(record: dict) -> dict:
    return {k: record[k] for k in SAME}


@pytest.mark.real_model
def test_workers_import_this_checkout(cluster):
    from nlqo.runtime.cluster import describe_workers

    workers = describe_workers(cluster.client)
    assert len(workers) == 2 and {w.nthreads for w in workers} == {1}
    assert {w.nlqo_path for w in workers} == {str(REPO)}
    paths = cluster.client.run(lambda: os.environ.get("PYTHONPATH", "").split(os.pathsep)[0])
    assert set(paths.values()) == {str(REPO)}


@pytest.mark.real_model
def test_a_cluster_run_records_what_a_single_process_run_records(cluster, reference, data, tmp_path):
    out = tmp_path / "cluster"
    argv = ["bench", "--questions", str(data["questions"]), "--corpus", str(data["corpus"]), "--out", str(out),
            "--model", "smollm2-135m", "--strategies", STRATEGIES, "--quiet", "--cluster", cluster.client.scheduler.address]  # fmt: skip
    assert main(argv) == 0
    records = read_records(out / "records.jsonl")
    assert len(records) == len(reference) == len(QUESTIONS) * 2
    assert {(r["qid"], r["strategy"]): _same(r) for r in records} == {k: _same(r) for k, r in reference.items()}
    run = json.loads((out / "run.json").read_text())
    single = json.loads((data["folder"] / "single" / "run.json").read_text())
    assert run["cluster"]["workers"] == 2 and set(run["cluster"]["model_threads"].values()) == {1}
    assert {k: run[k] for k in ("runtime", "model", "embedder", "corpus_sha256", "threads")} == {
        k: single[k] for k in ("runtime", "model", "embedder", "corpus_sha256", "threads")
    }
    assert (out / "index" / "manifest.json").is_file()  # embedded on the workers, assembled here


@pytest.mark.real_model
def test_a_worker_killed_mid_run_then_the_run_interrupted_and_resumed_records_every_question_once(
    cluster, reference, data, tmp_path
):
    from nlqo.runtime.cluster import describe_workers

    out = tmp_path / "killed"
    argv = ["bench", "--questions", str(data["questions"]), "--index", str(data["folder"] / "single" / "index"), "--out", str(out),
            "--model", "smollm2-135m", "--strategies", STRATEGIES, "--quiet", "--cluster", cluster.client.scheduler.address]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    client = subprocess.Popen(
        [sys.executable, "-m", "nlqo", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    records = out / "records.jsonl"
    try:
        # 1. a worker dies while it runs a question: the scheduler runs that question again elsewhere
        victim = _busy_worker(cluster.client, client, timeout_s=600)
        pid = {w.address: w.pid for w in describe_workers(cluster.client)}[victim]
        os.kill(pid, signal.SIGKILL)
        killed_at = len(read_records(records, repair=False))
        # 2. the client itself stops mid-run, after at least one more question came back
        _wait_for(
            lambda: len(read_records(records, repair=False)) > killed_at or client.poll() is not None, 600, client
        )
        if client.poll() is None:
            client.send_signal(signal.SIGKILL)
        client.wait(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    interrupted = len(read_records(records))
    assert killed_at < len(reference) and interrupted < len(reference), (
        "the run finished before it could be interrupted"
    )
    # 3. the same command again resumes: every question recorded exactly once, answers as in one process
    assert main(argv) == 0
    keys = [(r["qid"], r["strategy"]) for r in read_records(records)]
    assert sorted(keys) == sorted(reference) and len(keys) == len(set(keys))
    assert {(r["qid"], r["strategy"]): _same(r) for r in read_records(records)} == {
        k: _same(r) for k, r in reference.items()
    }
    _wait_for(lambda: len(cluster.client.scheduler_info()["workers"]) == 2, 120)  # the nanny restarted the worker


def _wait_for(condition, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s"
                + (
                    f"; client stderr: {process.stderr.read()[-2000:]}"
                    if process and process.poll() is not None
                    else ""
                )
            )
        time.sleep(0.2)


def _busy_worker(client, process: subprocess.Popen, timeout_s: float) -> str:
    """A worker running one of the bench's question tasks (after at least one record was written)."""
    found: list[str] = []

    def busy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the bench client exited ({process.returncode}): {process.stderr.read()[-2000:]}")
        found[:] = [w for w, keys in client.processing().items() if any(str(k).startswith("answer-") for k in keys)]
        return bool(found)

    _wait_for(busy, timeout_s, process)
    return found[0]


@pytest.mark.real_model
def test_an_index_embedded_on_the_cluster_equals_one_built_here(cluster, data, tmp_path):
    import faiss
    import numpy as np

    from nlqo.index.search import Index

    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": f"{i}-{j}", "title": t, "text": f"{x} (copy {j})"} for j in range(20) for i, t, x in PASSAGES
    ]  # 120 passages: several chunks per worker
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    here, there = tmp_path / "here", tmp_path / "there"
    assert main(["index", str(corpus), "--out", str(here), "--quiet", "--batch-size", "16"]) == 0
    assert (
        main(
            [
                "index",
                str(corpus),
                "--out",
                str(there),
                "--quiet",
                "--batch-size",
                "16",
                "--index-type",
                "flat",
                "--cluster",
                cluster.client.scheduler.address,
            ]
        )
        == 0
    )
    a, b = (json.loads((p / "manifest.json").read_text()) for p in (here, there))
    assert (
        {k: a[k] for k in ("count", "dim", "embedder", "kind")}
        == {k: b[k] for k in ("count", "dim", "embedder", "kind")}
        == {**{k: a[k] for k in ("dim", "embedder")}, "count": 120, "kind": "flat"}
    )
    va, vb = (faiss.read_index(str(p / "dense.faiss")).reconstruct_n(0, 120) for p in (here, there))
    np.testing.assert_allclose(va, vb, atol=1e-5)  # same rows in the same order (batches differ only in padding)
    for question in ("Which river flows through Vienna?", "Who released Counterparts?"):
        ours, theirs = (Index.open(p).retriever("dense").search(question, k=25) for p in (here, there))
        assert {h.passage.id for h in ours[:20]} == {
            h.passage.id for h in theirs[:20]
        }  # the 20 copies of the one passage
        np.testing.assert_allclose([h.score for h in ours], [h.score for h in theirs], atol=1e-5)

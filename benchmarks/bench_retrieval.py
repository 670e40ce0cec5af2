"""Retrieval on the shared QA sets: gold-title recall and query latency of dense, BM25 and hybrid search, dense
also on HNSW and IVF indexes of the same vectors, and index build speed (the docs' table: ``--threads 1``).
"""

import atexit
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import attrs
import numpy as np

from nlqo.embed import DEFAULT_EMBEDDER, SentenceEmbedder
from nlqo.eval.datasets import Question, QuestionSet
from nlqo.eval.experiment import DATA, SETS, THREADS, Block, Experiment, Option, main, torch_threads
from nlqo.index import Corpus, DenseParams, Index, build_index

MODES, KINDS = ("dense", "bm25", "hybrid"), ("hnsw", "ivf")


@attrs.define(eq=False)
class Replay:
    """The embedder, handing back passage vectors already computed (to build other FAISS kinds without embedding)."""

    inner: SentenceEmbedder
    vectors: np.ndarray

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, texts, *, kind="query", progress=None):
        return self.vectors if kind == "passage" else self.inner.encode(texts, kind=kind, progress=progress)


def setup(args) -> dict:
    torch_threads(args)
    work = Path(tempfile.mkdtemp(prefix="nlqo-bench-"))
    atexit.register(shutil.rmtree, work, True)
    return {"args": args, "embedder": SentenceEmbedder.load(args.embedder), "work": work}


def flat(context: dict, name: str) -> tuple[tuple[Question, ...], dict, Index]:
    """The questions of set ``name``, its flat index (built once per run) and how long building took."""
    if name not in context:
        args, embedder = context["args"], context["embedder"]
        questions = QuestionSet.load(args.data / f"{name}.jsonl.gz", limit=args.limit).questions
        report = build_index(args.data / f"{name}_corpus.jsonl.gz", context["work"] / name, embedder, progress=True)
        build = {"passages": report.manifest.count, "build_s": report.seconds, "passages_per_s": report.passages_per_second}  # fmt: skip
        context[name] = questions, build, Index.open(context["work"] / name, embedder=embedder)
    return context[name]


def loadavg() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def measure(context: dict, case: dict, mode: str) -> dict:
    import torch

    load_before, name = loadavg(), case["dataset"]
    questions, build, index = flat(context, name)
    record = {**build, "questions": len(questions), "torch_threads": torch.get_num_threads()}
    if mode in KINDS:
        replay, where = Replay(context["embedder"], index.dense.reconstruct_n(0, len(index))), context["work"] / f"{name}-{mode}"  # fmt: skip
        corpus = Corpus(context["args"].data / f"{name}_corpus.jsonl.gz")
        record["build_s_without_embedding"] = build_index(corpus, where, replay, params=DenseParams(kind=mode)).seconds
        index = Index.open(where, embedder=context["embedder"])
    search = {"bm25": index.bm25_search, "hybrid": index.hybrid_search}.get(mode, index.search)
    search(questions[0].question, 1)  # warm-up
    latencies, found = [], {3: [], 5: []}  # found[k]: per question, the share of its gold titles in the top k
    for q in questions:
        started = time.perf_counter()
        hits = search(q.question, 5)
        latencies.append((time.perf_counter() - started) * 1000)
        gold = set(q.supporting_titles)
        for k in found:
            found[k].append(len(gold & {h.passage.title for h in hits[:k]}) / len(gold))
    for k, shares in found.items():
        record |= {f"recall@{k}": statistics.fmean(shares), f"all@{k}": statistics.fmean(f == 1.0 for f in shares)}
    record["all@5_first100"] = statistics.fmean(f == 1.0 for f in found[5][:100])
    record |= {"latency_ms_mean": statistics.fmean(latencies), "latency_ms_p95": float(np.percentile(latencies, 95))}
    return record | {"load_before": load_before, "load_after": loadavg()}


def table(records: list[dict], run: dict) -> str:
    sets = {r["dataset"]: [] for r in records}
    for r in sorted(records, key=lambda r: (MODES + KINDS).index(r["mode"])):
        sets[r["dataset"]].append(r)
    first = records[0]
    lines = [
        f"Measured {run['started'][:10]} on {run['machine']}, {run['cpus']} cores ({first['torch_threads']} torch thread(s)), "
        f"Python {run['python']}, embedder `{run['embedder']}`, flat index, every question of each set as the query "
        f"(`python benchmarks/bench_retrieval.py --threads 1`). Load average before / after: "
        f"{first['load_before']} / {records[-1]['load_after']} (other work on the machine slows the timings, not the recall).",  # fmt: skip
        "",
        "**Recall of gold supporting titles.** recall@k: share of gold titles among the top k passages; "
        "all@k: share of questions with every gold title in the top k; all@5 (first 100): the same on the first 100 questions.",  # fmt: skip
        "",
        "| set | mode | recall@3 | recall@5 | all@3 | all@5 | all@5 (first 100) | latency mean ms | latency p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in sets.items():
        for s in rows:
            mode = s["mode"] if s["mode"] in MODES else f"dense, {s['mode']}"
            lines.append(f"| {name} | {mode} | {s['recall@3']:.3f} | {s['recall@5']:.3f} | {s['all@3']:.1%} | {s['all@5']:.1%} | "
                         f"{s['all@5_first100']:.0%} | {s['latency_ms_mean']:.1f} | {s['latency_ms_p95']:.1f} |")  # fmt: skip
    lines += [
        "",
        "**Index build** (flat; time is almost all embedding; HNSW / IVF rows reuse the flat build's vectors).",
        "",
        "| set | passages | questions | build s | passages/s | HNSW build s (no embedding) | IVF build s (no embedding) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in sets.items():
        kinds = {r["mode"]: f"{r['build_s_without_embedding']:.2f}" for r in rows if r["mode"] in KINDS}
        r = rows[0]
        lines.append(f"| {name} | {r['passages']} | {r['questions']} | {r['build_s']:.1f} | {r['passages_per_s']:.1f} | {kinds.get('hnsw', '-')} | {kinds.get('ivf', '-')} |")  # fmt: skip
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="retrieval",
    blocks=(Block("docs/retrieval.md", "retrieval-benchmark", table, title="Retrieval"),),
    about=__doc__,
    cases=lambda args: [{"dataset": name} for name in args.datasets],
    key=("dataset",),
    configs=lambda args: [*MODES, *(k for k in KINDS if k in args.kinds)],
    config_field="mode",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--data", type=Path, default=DATA, help="folder of the sets and corpora"),
        Option.of("--datasets", nargs="+", default=list(SETS), help="question sets"),
        Option.of("--kinds", nargs="*", default=list(KINDS), help="FAISS kinds besides flat for dense recall"),
        Option.of("--embedder", default=DEFAULT_EMBEDDER),
        Option.of("--limit", type=int, help="only the first N questions of each set"),
        THREADS,
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

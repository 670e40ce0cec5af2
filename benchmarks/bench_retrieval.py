"""Retrieval, in parts (``--part``):

* **recall**: on the shared QA sets, gold-title recall and query latency of dense, BM25 and hybrid search, dense
  also on HNSW and IVF indexes of the same vectors, and index build speed (the docs' table: ``--threads 1``).
* **ann**: approximate dense search on the HotpotQA corpus's vectors (a size other than 0: a synthetic set of that
  many, a real vector plus Gaussian noise each): recall@10 against the exact index, query time (one query at a
  time, one FAISS thread), build time and size of FAISS flat, HNSW (several ``efSearch``) and IVF (several
  ``nprobe``) with nlqo's ``DenseParams`` (``nlqo index --index-type flat|hnsw|ivf``).
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

from nlqo.runtime.embed import DEFAULT_EMBEDDER, SentenceEmbedder
from nlqo.eval.datasets import Question, QuestionSet
from nlqo.eval.experiment import DATA, SETS, THREADS, Block, Experiment, Option, load_average, main, torch_threads
from nlqo.index import Corpus, DenseParams, Index, build_index
from nlqo.index.dense import build_dense

MODES, KINDS, ANN, K = ("dense", "bm25", "hybrid"), ("hnsw", "ivf"), ("flat", "hnsw", "ivf"), 10


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


def synthetic(real: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` vectors: a random real vector each, plus noise (sigma 0.6 over the whole vector), normalised."""
    rng = np.random.default_rng(seed)
    noisy = real[rng.integers(0, len(real), size=n)]
    noisy = noisy + rng.normal(0.0, 0.6 / np.sqrt(real.shape[1]), size=noisy.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def settings(index, p: DenseParams):
    """Set each searched value on ``index`` in turn: its label, and whether it is nlqo's default."""
    if p.kind == "flat":
        yield "exact", True
    for ef in (16, 32, 64, 128, 256) if p.kind == "hnsw" else ():
        index.hnsw.efSearch = ef
        yield f"M={p.hnsw_m}, efSearch={ef}", ef == p.ef_search
    for nprobe in sorted(n for n in {1, 2, 4, 8, 16, 32, p.nprobe} if n <= p.nlist) if p.kind == "ivf" else ():
        index.nprobe = nprobe
        yield f"nlist={p.nlist}, nprobe={nprobe}", nprobe == p.nprobe


def ann(context: dict, size: int, kind: str) -> dict:
    """FAISS ``kind`` over HotpotQA's passage vectors (or ``size`` synthetic ones) against the exact top ``K``."""
    import faiss

    questions, _, flat_index = flat(context, "hotpotqa_dev_199")
    real = flat_index.dense.reconstruct_n(0, len(flat_index))
    queries = context["embedder"].encode([q.question for q in questions], kind="query", progress=False)
    before, threads = load_average(), faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    vectors = real if size == 0 else synthetic(real, size)
    _, exact = build_dense(vectors, DenseParams().resolved(len(vectors))).search(queries, K)
    params = DenseParams(kind=kind).resolved(len(vectors))
    started = time.perf_counter()
    index = build_dense(vectors, params)
    build_s, size_mb, rows = round(time.perf_counter() - started, 2), round(faiss.serialize_index(index).nbytes / 2**20, 2), []  # fmt: skip
    for setting, default in settings(index, params):
        _, found = index.search(queries, K)
        started = time.perf_counter()
        for q in queries:
            index.search(q[None, :], K)
        query_ms = round((time.perf_counter() - started) * 1000 / len(queries), 3)
        recall = round(float(np.mean([len(set(f) & set(e)) / K for f, e in zip(found, exact)])), 4)
        rows.append({"setting": setting, "default": default, "recall_at_10": recall, "query_ms": query_ms, "build_s": build_s, "size_mb": size_mb})  # fmt: skip
    faiss.omp_set_num_threads(threads)
    load = {"load_before": before, "load_after": load_average()}
    source = f"{flat_index.manifest.source} ({flat_index.manifest.embedder})"
    return {"vectors": len(vectors), "synthetic": size != 0, "source": source, "queries": len(queries), "rows": rows, **load}  # fmt: skip


def measure(context: dict, case: dict, mode: str) -> dict:
    import torch

    if case["part"] == "ann":
        return ann(context, case["size"], mode)
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
        f"Measured {first['measured_at'][:10]} on {run['machine']}, {run['cpus']} cores ({first['torch_threads']} torch thread(s)), "
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


def ann_table(records: list[dict], run: dict) -> str:
    records = sorted(records, key=lambda r: (r["synthetic"], r["vectors"], ANN.index(r["mode"])))
    first, last = records[0], records[-1]
    lines = [
        f"Vectors: {first['source']}; queries: the {first['queries']} HotpotQA questions; one FAISS thread, "
        f"one query at a time; recall@10 against the exact (flat) top 10. Sets larger than the real one are synthetic "
        f"(a real vector plus noise). Measured {first['measured_at']}, {run['machine']}, {run['cpus']} cores, load average "
        f"before / after {', '.join(map(str, first['load_before']))} / {', '.join(map(str, last['load_after']))} "
        "(beside another job). `python benchmarks/bench_retrieval.py --part ann`.",
        "",
        "| vectors | index | setting | recall@10 | ms / query | build s | size MB |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in records:
        vectors = f"{r['vectors']}{' (synthetic)' if r['synthetic'] else ''}"
        for x in r["rows"]:
            setting = x["setting"] + (" (nlqo default)" if x["default"] and r["mode"] != "flat" else "")
            lines.append(f"| {vectors} | {r['mode']} | {setting} | {x['recall_at_10']:.3f} | {x['query_ms']:.2f} | {x['build_s']} | {x['size_mb']} |")  # fmt: skip
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="retrieval",
    blocks=(
        Block("docs/retrieval.md", "retrieval-benchmark", table, title="Retrieval", part="recall"),
        Block("docs/scale-out.md", "ann-benchmark", ann_table, title="Scale-out: Dask for batch work", part="ann"),
    ),
    cases=lambda args: [
        *({"part": "recall", "dataset": name} for name in args.datasets if args.part in ("recall", "all")),
        *({"part": "ann", "size": n} for n in args.sizes if args.part in ("ann", "all")),
    ],
    configs=lambda args: [*MODES, *(k for k in KINDS if k in args.kinds), "flat"],
    config_field="mode",
    applies=lambda case, mode: mode in (ANN if case["part"] == "ann" else MODES + KINDS),
    setup=setup,
    measure=measure,
    options=(
        Option.of("--part", choices=("recall", "ann", "all"), default="all"),
        Option.of("--data", type=Path, default=DATA, help="folder of the sets and corpora"),
        Option.of("--datasets", nargs="+", default=list(SETS), help="question sets"),
        Option.of("--kinds", nargs="*", default=list(KINDS), help="FAISS kinds besides flat"),
        Option.of("--sizes", type=int, nargs="+", default=[0, 50000], help="ann: vector counts; 0 = the real vectors"),
        Option.of("--embedder", default=DEFAULT_EMBEDDER),
        Option.of("--limit", type=int, help="only the first N questions of each set"),
        THREADS,
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

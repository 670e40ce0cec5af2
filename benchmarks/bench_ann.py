"""Approximate dense search: recall against the exact index, query time, build time and size of FAISS flat, HNSW
and IVF (``nlqo index --index-type flat|hnsw|ivf``) with nlqo's ``DenseParams``.

Vectors: a real flat index's (default: the HotpotQA corpus, embedded once into .nlqo/bench-ann/index); a size other
than 0 is a synthetic set of that many (a real vector plus Gaussian noise). Queries: the 199 HotpotQA questions, one
at a time on one FAISS thread. HNSW is searched at several ``efSearch``, IVF at several ``nprobe``.
"""

import time
from pathlib import Path

import numpy as np

from nlqo.embed import SentenceEmbedder
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import DATA, REPO, Block, Experiment, Option, load_average, main
from nlqo.index import DenseParams, Index, build_index
from nlqo.index.dense import build_dense

KINDS, K = ("flat", "hnsw", "ivf"), 10


def setup(args) -> tuple[np.ndarray, str, np.ndarray]:
    """The passage vectors, where they come from, and the query vectors."""
    import faiss

    faiss.omp_set_num_threads(1)
    embedder, path = SentenceEmbedder.load(), args.index or REPO / ".nlqo" / "bench-ann" / "index"
    if args.index is None and not (path / "manifest.json").is_file():
        build_index(DATA / "hotpotqa_dev_199_corpus.jsonl.gz", path, embedder)
    index = Index.open(path, embedder=embedder)
    if index.manifest.kind != "flat":
        raise SystemExit(f"{path} is a {index.manifest.kind} index; pass a flat one (its vectors are stored exactly)")
    questions = QuestionSet.load(DATA / "hotpotqa_dev_199.jsonl.gz").questions
    queries = embedder.encode([q.question for q in questions], kind="query", progress=False)
    source = f"{index.manifest.source} ({index.manifest.embedder})"
    return index.dense.reconstruct_n(0, index.dense.ntotal), source, queries


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


def measure(context, case: dict, kind: str) -> dict:
    import faiss

    (real, source, queries), before = context, load_average()
    vectors = real if case["size"] == 0 else synthetic(real, case["size"])
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
    load = {"load_before": before, "load_after": load_average()}
    return {"vectors": len(vectors), "synthetic": case["size"] != 0, "source": source, "queries": len(queries), "rows": rows, **load}  # fmt: skip


def table(records: list[dict], run: dict) -> str:
    records = sorted(records, key=lambda r: (r["synthetic"], r["vectors"], KINDS.index(r["index"])))
    first, last = records[0], records[-1]
    lines = [
        f"Vectors: {first['source']}; queries: the {first['queries']} HotpotQA questions; one FAISS thread, "
        f"one query at a time; recall@10 against the exact (flat) top 10. Sets larger than the real one are synthetic "
        f"(a real vector plus noise). Measured {run['started']}, {run['machine']}, {run['cpus']} cores, load average "
        f"before / after {', '.join(map(str, first['load_before']))} / {', '.join(map(str, last['load_after']))} "
        "(beside another job). `python benchmarks/bench_ann.py`.",
        "",
        "| vectors | index | setting | recall@10 | ms / query | build s | size MB |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in records:
        vectors = f"{r['vectors']}{' (synthetic)' if r['synthetic'] else ''}"
        for x in r["rows"]:
            setting = x["setting"] + (" (nlqo default)" if x["default"] and r["index"] != "flat" else "")
            lines.append(f"| {vectors} | {r['index']} | {setting} | {x['recall_at_10']:.3f} | {x['query_ms']:.2f} | {x['build_s']} | {x['size_mb']} |")  # fmt: skip
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="ann",
    blocks=(Block("docs/scale-out.md", "ann-benchmark", table, title="Scale-out: Dask for batch work"),),
    about=__doc__,
    cases=lambda args: [{"size": n} for n in args.sizes],
    key=("size",),
    configs=lambda args: KINDS,
    config_field="index",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--index", type=Path, help="a flat nlqo index whose vectors to use (default: the HotpotQA corpus)"),
        Option.of("--sizes", type=int, nargs="+", default=[0, 50000], help="vector counts; 0 = the real vectors"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

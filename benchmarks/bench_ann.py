"""Approximate dense search for large corpora: recall against the exact index, query time, build
time and size of FAISS flat, HNSW and IVF (``nlqo index --index-type flat|hnsw|ivf``).

    python benchmarks/bench_ann.py                          # real vectors + a synthetic 50k set
    python benchmarks/bench_ann.py --index idx/ --sizes 0,100000
    python benchmarks/bench_ann.py --render

Vectors: the passage vectors of a real flat index (``--index``; default: the HotpotQA corpus,
embedded once into .nlqo/bench-ann/index) and, for each larger size in ``--sizes``, a synthetic
set of that many vectors made from them (a real vector plus Gaussian noise, renormalised: cosine
about 0.86 to its source), since no corpus of that size ships here. Queries: the 199 HotpotQA
questions, embedded as queries. Recall@10 = share of the exact top 10 (flat) that the index
returns; query time = per query, one FAISS thread, queries sent one by one. Index parameters are
nlqo's (``nlqo.index.dense.DenseParams``); HNSW is searched at several ``efSearch`` and IVF at
several ``nprobe`` values, nlqo's default marked. Results: benchmarks/results/ann.json and the
block in docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results" / "ann.json"
WORK = ROOT / ".nlqo" / "bench-ann"
DOC = ROOT / "docs" / "scale-out.md"
MARKER = "ann-benchmark"
K = 10
EF_SEARCH = (16, 32, 64, 128, 256)
NPROBE = (1, 2, 4, 8, 16, 32)


def passage_vectors(index: Path | None) -> tuple[np.ndarray, str]:
    import faiss

    if index is None:
        index = WORK / "index"
        if not (index / "manifest.json").is_file():
            import subprocess

            WORK.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "nlqo",
                    "index",
                    str(DATA / "hotpotqa_dev_199_corpus.jsonl.gz"),
                    "--out",
                    str(index),
                    "--quiet",
                ],
                check=True,
                cwd=ROOT,
            )
    manifest = json.loads((index / "manifest.json").read_text())
    if manifest["kind"] != "flat":
        raise SystemExit(f"{index} is a {manifest['kind']} index; pass a flat one (its vectors are stored exactly)")
    flat = faiss.read_index(str(index / "dense.faiss"))
    return flat.reconstruct_n(0, flat.ntotal), f"{manifest['source']} ({manifest['embedder']})"


def query_vectors() -> np.ndarray:
    from nlqo.embed import SentenceEmbedder

    with gzip.open(DATA / "hotpotqa_dev_199.jsonl.gz", "rt", encoding="utf-8") as f:
        questions = [json.loads(line)["question"] for line in f if line.strip()]
    return SentenceEmbedder.load().encode(questions, kind="query", progress=False)


def synthetic(real: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """``n`` vectors: a random real vector each, plus noise (sigma 0.6 over the whole vector), normalised."""
    rng = np.random.default_rng(seed)
    base = real[rng.integers(0, len(real), size=n)]
    noisy = base + rng.normal(0.0, 0.6 / np.sqrt(real.shape[1]), size=base.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def per_query_ms(index, queries: np.ndarray) -> float:
    started = time.perf_counter()
    for q in queries:
        index.search(q[None, :], K)
    return (time.perf_counter() - started) * 1000 / len(queries)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


def size_mb(index) -> float:
    import faiss

    return round(faiss.serialize_index(index).nbytes / 2**20, 2)


def measure(vectors: np.ndarray, queries: np.ndarray) -> dict:
    from nlqo.index.dense import DenseParams, build_dense

    rows: list[dict] = []
    built = {}
    for kind in ("flat", "hnsw", "ivf"):
        params = DenseParams(kind=kind).resolved(len(vectors))
        started = time.perf_counter()
        built[kind] = (build_dense(vectors, params), params)
        built[kind] = (*built[kind], time.perf_counter() - started)
    flat, _, flat_build = built["flat"]
    _, exact = flat.search(queries, K)
    rows.append(
        {
            "kind": "flat",
            "setting": "exact",
            "default": True,
            "recall_at_10": 1.0,
            "query_ms": round(per_query_ms(flat, queries), 3),
            "build_s": round(flat_build, 2),
            "size_mb": size_mb(flat),
        }
    )
    hnsw, params, build = built["hnsw"]
    for ef in EF_SEARCH:
        hnsw.hnsw.efSearch = ef
        _, found = hnsw.search(queries, K)
        rows.append({"kind": "hnsw", "setting": f"M={params.hnsw_m}, efSearch={ef}", "default": ef == params.ef_search, "recall_at_10": round(recall(found, exact), 4),
                     "query_ms": round(per_query_ms(hnsw, queries), 3), "build_s": round(build, 2), "size_mb": size_mb(hnsw)})  # fmt: skip
    ivf, params, build = built["ivf"]
    for nprobe in sorted({*NPROBE, params.nprobe}):
        if nprobe > params.nlist:
            continue
        ivf.nprobe = nprobe
        _, found = ivf.search(queries, K)
        rows.append({"kind": "ivf", "setting": f"nlist={params.nlist}, nprobe={nprobe}", "default": nprobe == params.nprobe, "recall_at_10": round(recall(found, exact), 4),
                     "query_ms": round(per_query_ms(ivf, queries), 3), "build_s": round(build, 2), "size_mb": size_mb(ivf)})  # fmt: skip
    return {"vectors": len(vectors), "rows": rows}


def render(results: dict) -> str:
    lines = [
        f"Vectors: {results['source']}; queries: the {results['queries']} HotpotQA questions; one FAISS thread, "
        f"one query at a time; recall@10 against the exact (flat) top 10. Sets larger than the real one are synthetic "
        f"(a real vector plus noise). Measured {results['date']}, {results['machine']}, load average before / after "
        f"{', '.join(map(str, results['load_before']))} / {', '.join(map(str, results['load_after']))} "
        "(beside another job). `python benchmarks/bench_ann.py`.",
        "",
        "| vectors | index | setting | recall@10 | ms / query | build s | size MB |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    for part in results["sets"]:
        for r in part["rows"]:
            mark = " (nlqo default)" if r["default"] and r["kind"] != "flat" else ""
            lines.append(
                f"| {part['vectors']}{' (synthetic)' if part.get('synthetic') else ''} | {r['kind']} | {r['setting']}{mark} | {r['recall_at_10']:.3f} | {r['query_ms']:.2f} | {r['build_s']} | {r['size_mb']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--index",
        type=Path,
        help="a flat nlqo index whose vectors to use (default: the HotpotQA corpus, embedded once)",
    )
    parser.add_argument("--sizes", default="0,50000", help="vector counts; 0 = the real vectors (default: %(default)s)")
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args()
    if not args.render:
        import faiss

        faiss.omp_set_num_threads(1)
        before = [round(x, 2) for x in os.getloadavg()]
        real, source = passage_vectors(args.index)
        queries = query_vectors()
        sets = []
        for n in (int(x) for x in args.sizes.split(",")):
            print(f"ann: {n or len(real)} vectors", file=sys.stderr, flush=True)
            vectors = real if n == 0 else synthetic(real, n)
            sets.append({**measure(vectors, queries), "synthetic": n != 0})
        results = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "source": source,
            "queries": len(queries),
            "load_before": before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "sets": sets,
        }
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    results = json.loads(RESULTS.read_text())
    write_block(DOC, MARKER, render(results), title="Scale-out: Dask for batch work")
    print(f"wrote {RESULTS} and the block in {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

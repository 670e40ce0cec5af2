"""Retrieval benchmark: build speed, query latency and gold-title recall on the shared QA sets.

For each question set (HotpotQA, 2Wiki, MuSiQue) it indexes the pooled corpus, asks every
question as the query in dense, BM25 and hybrid mode, and measures recall@3/@5 of the gold
supporting titles: the share of gold titles retrieved, and the share of questions with all of them
retrieved. Dense recall is also measured on HNSW and IVF indexes built from the same vectors.

    python benchmarks/bench_retrieval.py --threads 1   # writes benchmarks/results/retrieval.json
                                                       # and the table in docs/retrieval.md
    python benchmarks/bench_retrieval.py --render      # only re-render the table from the JSON
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import attrs
import numpy as np

from nlqo.embed import DEFAULT_EMBEDDER, SentenceEmbedder
from nlqo.index import Corpus, DenseParams, Index, build_index
from nlqo.docblocks import write_block

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DATASETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
MODES = ("dense", "bm25", "hybrid")
KS = (3, 5)
MARKER = "retrieval-benchmark"


@attrs.define(eq=False)
class ReplayEmbedder:
    """Hands back passage vectors already computed (to build other FAISS kinds without re-embedding)."""

    inner: SentenceEmbedder
    vectors: np.ndarray
    name: str = attrs.field(init=False)
    dim: int = attrs.field(init=False)
    query_prefix: str = attrs.field(init=False)
    passage_prefix: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.name, self.dim = self.inner.name, self.inner.dim
        self.query_prefix, self.passage_prefix = self.inner.query_prefix, self.inner.passage_prefix

    def encode(self, texts, *, kind="query", progress=None):
        if kind == "passage":
            assert len(texts) == len(self.vectors)
            return self.vectors
        return self.inner.encode(texts, kind=kind, progress=progress)


def load_questions(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def evaluate(search, questions: list[dict]) -> dict:
    """Recall of gold titles at each k, and latency of ``search(question, max(KS))``."""
    latencies, found = [], {k: [] for k in KS}
    for q in questions:
        gold = set(q["supporting_titles"])
        start = time.perf_counter()
        hits = search(q["question"], max(KS))
        latencies.append((time.perf_counter() - start) * 1000)
        for k in KS:
            titles = {h.passage.title for h in hits[:k]}
            found[k].append(len(gold & titles) / len(gold))
    out = {}
    for k in KS:
        out[f"recall@{k}"] = statistics.fmean(found[k])
        out[f"all@{k}"] = statistics.fmean(1.0 if f == 1.0 else 0.0 for f in found[k])
        out[f"all@{k}_first100"] = statistics.fmean(1.0 if f == 1.0 else 0.0 for f in found[k][:100])
    out["latency_ms_mean"] = statistics.fmean(latencies)
    out["latency_ms_p95"] = float(np.percentile(latencies, 95))
    return out


def run_dataset(
    name: str, data: Path, embedder: SentenceEmbedder, workdir: Path, kinds: list[str], limit: int | None
) -> dict:
    questions = load_questions(data / f"{name}.jsonl.gz")[:limit]
    corpus = data / f"{name}_corpus.jsonl.gz"
    print(f"[{name}] indexing {corpus.name} ...", file=sys.stderr)
    report = build_index(corpus, workdir / name, embedder, progress=True)
    index = Index.open(workdir / name, embedder=embedder)
    result = {
        "questions": len(questions),
        "passages": report.manifest.count,
        "build": {"kind": "flat", "seconds": report.seconds, "passages_per_s": report.passages_per_second},
        "modes": {},
        "dense_kinds": {},
    }
    searches = {"dense": index.search, "bm25": index.bm25_search, "hybrid": index.hybrid_search}
    for mode in MODES:
        print(f"[{name}] {mode}: {len(questions)} questions", file=sys.stderr)
        searches[mode](questions[0]["question"], 1)  # warm-up
        result["modes"][mode] = evaluate(searches[mode], questions)
    vectors = index.dense.reconstruct_n(0, index.dense.ntotal)
    for kind in kinds:
        if kind == "flat":
            continue
        replay = ReplayEmbedder(embedder, vectors)
        rebuilt = build_index(Corpus(corpus), workdir / f"{name}-{kind}", replay, params=DenseParams(kind=kind))
        other = Index.open(workdir / f"{name}-{kind}", embedder=embedder)
        print(f"[{name}] dense on {kind}", file=sys.stderr)
        stats = evaluate(other.search, questions)
        stats["build_seconds_without_embedding"] = rebuilt.seconds
        stats["params"] = rebuilt.manifest.faiss
        result["dense_kinds"][kind] = stats
    return result


def markdown(results: dict) -> str:
    meta = results["meta"]
    lines = [
        f"Measured {meta['date']} on {meta['machine']}, {meta['cores']} cores ({meta['torch_threads']} torch thread(s)), "
        f"Python {meta['python']}, "
        f"embedder `{meta['embedder']}`, flat index, every question of each set as the query "
        f"(`python benchmarks/bench_retrieval.py --threads 1`). Load average before / after: "
        f"{meta['load_before']} / {meta['load_after']} (other work on the machine slows the timings, not the recall).",
        "",
        "**Recall of gold supporting titles.** recall@k: share of gold titles among the top k passages; "
        "all@k: share of questions with every gold title in the top k; all@5 (first 100): the same on the first 100 questions.",
        "",
        "| set | mode | recall@3 | recall@5 | all@3 | all@5 | all@5 (first 100) | latency mean ms | latency p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results["datasets"].items():
        rows = [(mode, r["modes"][mode]) for mode in MODES]
        rows += [(f"dense, {kind}", stats) for kind, stats in r["dense_kinds"].items()]
        for mode, s in rows:
            lines.append(
                f"| {name} | {mode} | {s['recall@3']:.3f} | {s['recall@5']:.3f} | {s['all@3']:.1%} | {s['all@5']:.1%} | "
                f"{s['all@5_first100']:.0%} | {s['latency_ms_mean']:.1f} | {s['latency_ms_p95']:.1f} |"
            )
    lines += [
        "",
        "**Index build** (flat; time is almost all embedding; HNSW / IVF rows reuse the flat build's vectors).",
        "",
        "| set | passages | questions | build s | passages/s | HNSW build s (no embedding) | IVF build s (no embedding) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in results["datasets"].items():
        extra = [
            f"{r['dense_kinds'][k]['build_seconds_without_embedding']:.2f}" if k in r["dense_kinds"] else "-"
            for k in ("hnsw", "ivf")
        ]
        lines.append(
            f"| {name} | {r['passages']} | {r['questions']} | {r['build']['seconds']:.1f} | {r['build']['passages_per_s']:.1f} | {extra[0]} | {extra[1]} |"
        )
    return "\n".join(lines)


def _write_block(path: Path, body: str) -> None:
    write_block(path, MARKER, body, title="Retrieval")


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder with the question sets and corpora")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated set names")
    parser.add_argument("--kinds", default="flat,hnsw,ivf", help="FAISS kinds to measure dense recall on")
    parser.add_argument("--embedder", default=DEFAULT_EMBEDDER)
    parser.add_argument("--limit", type=int, help="only the first N questions of each set")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "retrieval.json")
    parser.add_argument(
        "--doc", type=Path, default=ROOT / "docs" / "retrieval.md", help="Markdown file to update ('' for none)"
    )
    parser.add_argument("--keep", type=Path, help="keep the built indexes in this folder")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice, one per core)")
    parser.add_argument("--render", action="store_true", help="only rewrite the Markdown table from the --out JSON")
    args = parser.parse_args(argv)
    if args.render:
        table = markdown(json.loads(args.out.read_text(encoding="utf-8")))
        _write_block(args.doc, table)
        print(table)
        return 0
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    embedder = SentenceEmbedder.load(args.embedder)
    results = {"meta": {}, "datasets": {}}
    with tempfile.TemporaryDirectory(prefix="nlqo-bench-") as tmp:
        workdir = args.keep or Path(tmp)
        for name in args.datasets.split(","):
            results["datasets"][name] = run_dataset(
                name, args.data, embedder, workdir, args.kinds.split(","), args.limit
            )
    results["meta"] = {
        "date": datetime.date.today().isoformat(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "embedder": embedder.name,
        "torch_threads": _torch_threads(),
        "limit": args.limit,
        "load_before": load_before,
        "load_after": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    table = markdown(results)
    if str(args.doc):
        _write_block(args.doc, table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

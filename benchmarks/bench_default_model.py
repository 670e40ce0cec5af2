"""Choose the default model of `nlqo ask` by measurement: quality and time per question.

For each bundled candidate, on the demo questions over the demo corpus (examples/): the linear
template's exact match and seconds per question, and whether the model writes valid IR for the
question (the parser's few-shot prompt, with repairs). Writes benchmarks/results/default_model.json
and a table into docs/models.md.

    python benchmarks/bench_default_model.py [--models qwen2.5-coder-0.5b qwen2.5-coder-1.5b] [--limit 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()

    from nlqo.embed import SentenceEmbedder
    from nlqo.errors import ParseFailure
    from nlqo.eval.datasets import QuestionSet
    from nlqo.eval.metrics import exact_match
    from nlqo.config import EngineConfig
    from nlqo.execute.engine import Engine
    from nlqo.index import Index, build_index
    from nlqo.models import load_transformers
    from nlqo.parser import parse_question

    folder = Path(tempfile.mkdtemp(prefix="nlqo-demo-index-")) / "index"
    build_index(REPO / "examples" / "demo_corpus.jsonl", folder, SentenceEmbedder.load(), progress=False)
    index = Index.open(folder)
    questions = QuestionSet.load(REPO / "examples" / "demo_questions.jsonl", limit=args.limit).questions
    rows = []
    for name in args.models:
        started = time.perf_counter()
        llm = load_transformers(name)
        load_s = time.perf_counter() - started
        engine = Engine.from_config(
            EngineConfig(measure_costs=False, relation_cache=False),
            llm=llm,
            retriever=index.retriever("hybrid"),
            embedder=index.embedder,
        )
        for q in questions:
            t0 = time.perf_counter()
            r = engine.ask(q.question, strategy="linear")
            linear_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            try:
                parsed = parse_question(q.question, llm)
                ir_ok, atoms = True, len(parsed.query.atoms)
            except ParseFailure:
                ir_ok, atoms = False, 0
            parse_s = time.perf_counter() - t0
            rows.append(
                {
                    "model": name,
                    "question": q.id,
                    "answer": r.answer,
                    "gold": list(q.answers),
                    "em": exact_match(r.answer, q.answers),
                    "linear_s": linear_s,
                    "hops": r.hops,
                    "generated": r.stats()["generated_tokens"],
                    "ir_valid": ir_ok,
                    "atoms": atoms,
                    "parse_s": parse_s,
                    "load_s": load_s,
                }
            )
            print(
                f"{name} {q.id}: {r.answer!r} (gold {q.answers[0]!r}) {linear_s:.1f}s hops={r.hops}; IR {'ok' if ir_ok else 'failed'} {parse_s:.1f}s",
                flush=True,
            )
        del engine, llm
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load": os.getloadavg()[0],
    }
    (REPO / "benchmarks" / "results").mkdir(exist_ok=True)
    (REPO / "benchmarks" / "results" / "default_model.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2)
    )
    lines = [
        f"Measured {meta['date']} on {meta['machine']} (load average {meta['load']:.1f} at the end), {len(questions)} demo questions over "
        "examples/demo_corpus.jsonl, linear template, k=3 hybrid (`python benchmarks/bench_default_model.py`).",
        "",
        "| model | EM (linear) | s / question (linear) | generated tokens | valid IR from the parser | s / parse |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in args.models:
        rs = [r for r in rows if r["model"] == name]
        lines.append(
            f"| {name} | {statistics.mean(r['em'] for r in rs):.2f} | {statistics.mean(r['linear_s'] for r in rs):.1f} | "
            f"{statistics.mean(r['generated'] for r in rs):.0f} | {sum(r['ir_valid'] for r in rs)}/{len(rs)} | {statistics.mean(r['parse_s'] for r in rs):.1f} |"
        )
    write_block(REPO / "docs" / "models.md", "default-model", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

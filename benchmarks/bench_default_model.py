"""Choose the default model of `nlqo ask` by measurement: quality and time per question.

For each candidate model, on the demo questions over examples/demo_corpus.jsonl: the linear template's exact
match and seconds per question, and whether the model writes valid IR (the parser's prompt, with repairs).
"""

import os
import statistics
import tempfile
import time
from pathlib import Path

from nlqo.config import EngineConfig
from nlqo.embed import SentenceEmbedder
from nlqo.errors import ParseFailure
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import REPO, Block, Experiment, Option, main
from nlqo.eval.metrics import exact_match
from nlqo.execute.engine import Engine
from nlqo.index import Index, build_index
from nlqo.models import load_transformers
from nlqo.parser import parse_question


def setup(args) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="nlqo-demo-index-")) / "index"
    build_index(REPO / "examples" / "demo_corpus.jsonl", folder, SentenceEmbedder.load(), progress=False)
    return {"index": Index.open(folder), "model": None, "llm": None}


def measure(context: dict, case: dict, model: str) -> dict:
    if context["model"] != model:
        context.update(model=None, llm=None)
        context.update(model=model, llm=load_transformers(model))
    llm, index, config = context["llm"], context["index"], EngineConfig(measure_costs=False, relation_cache=False)
    engine = Engine.from_config(config, llm=llm, retriever=index.retriever("hybrid"), embedder=index.embedder)
    started = time.perf_counter()
    r = engine.ask(case["text"], strategy="linear")
    linear_s, started = time.perf_counter() - started, time.perf_counter()
    try:
        ir_valid, atoms = True, len(parse_question(case["text"], llm).query.atoms)
    except ParseFailure:
        ir_valid, atoms = False, 0
    return {"answer": r.answer, "em": exact_match(r.answer, case["gold"]), "linear_s": linear_s, "hops": r.hops, "generated": r.stats()["generated_tokens"], "ir_valid": ir_valid, "atoms": atoms, "parse_s": time.perf_counter() - started, "load": os.getloadavg()[0]}  # fmt: skip


def table(rows: list[dict], run: dict) -> str:
    out = [
        f"Measured {run['started'][:10]} on {run['machine']}, {run['cpus']} cores (load average {rows[-1]['load']:.1f} "
        f"at the end), {len({r['question'] for r in rows})} demo questions over examples/demo_corpus.jsonl, linear "
        "template, k=3 hybrid (`python benchmarks/bench_default_model.py`).",
        "",
        "| model | EM (linear) | s / question (linear) | generated tokens | valid IR from the parser | s / parse |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for rs in filter(None, ([r for r in rows if r["model"] == m] for m in run["models"])):
        mean = {k: statistics.mean(r[k] for r in rs) for k in ("em", "linear_s", "generated", "parse_s")}
        out.append(f"| {rs[0]['model']} | {mean['em']:.2f} | {mean['linear_s']:.1f} | {mean['generated']:.0f} | {sum(r['ir_valid'] for r in rs)}/{len(rs)} | {mean['parse_s']:.1f} |")  # fmt: skip
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="default_model",
    blocks=(Block("docs/models.md", "default-model", table),),
    about=__doc__,
    cases=lambda args: [
        {"question": q.id, "text": q.question, "gold": list(q.answers)}
        for q in QuestionSet.load(REPO / "examples" / "demo_questions.jsonl", limit=args.limit).questions
    ],  # fmt: skip
    key=("question",),
    configs=lambda args: args.models,
    config_field="model",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"], help="models compared"),
        Option.of("--limit", type=int, default=8, help="demo questions (the first LIMIT)"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

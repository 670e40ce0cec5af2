"""The bundled local models side by side on transformers (float32), in parts (``--part``):

* **costs**: the one-time GGUF -> safetensors conversion (as its cache marker timed it; --fresh-cache
  converts into a new cache), the load time, greedy decode tokens/s on a fixed prompt, and the time to
  first token of a question after the parse prompt's instruction and examples (a prefix the parser
  reuses for every question), from scratch versus with the prefix's KV state from the prefix cache
  (checking that both give the same tokens). On a machine shared with other jobs, --threads 1 gives
  steadier numbers (torch's one thread per core oversubscribes the cores).
* **default**: which model `nlqo ask` should default to: on the first ``--limit`` demo questions over
  examples/demo_corpus.jsonl, the linear template's exact match and seconds per question, and whether
  the model writes valid IR (the parser's prompt, with repairs).
"""

import gc
import os
import statistics
import time
from pathlib import Path

from nlqo.config import EngineConfig
from nlqo.errors import ModelNotAvailable, ParseFailure
from nlqo.eval.datasets import QuestionSet
from nlqo.eval.experiment import REPO, THREADS, Block, Experiment, Option, main, torch_threads
from nlqo.eval.metrics import exact_match
from nlqo.eval.workspace import open_index
from nlqo.main.engine import Engine
from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.models import BUNDLED, get_bundled, load_transformers, resolve_model
from nlqo.runtime.models.convert import read_marker
from nlqo.parser.parse import parse_question
from nlqo.runtime.prompts.planning import PARSE

DECODE_PROMPT = "Write a detailed paragraph about the history of the city of Paris."
QUESTIONS = (
    "What is the capital of the country where the inventor of the telephone was born?",
    "Which river flows through the city where the author of Faust died?",
    "Is the university attended by the founder of Microsoft older than the university attended by the founder of Amazon?",
    "In which year did the band that recorded Abbey Road release their first album?",
)


def question_suffix(llm, question: str) -> str:
    """The chat-template text of the parse prompt's user turn for ``question`` plus the assistant header."""
    system = [ChatMessage("system", "S")]
    with_q = llm.format_chat([*system, ChatMessage("user", PARSE.template.format(question=question))])
    return with_q[len(llm.format_chat(system, add_generation_prompt=False)) :]


def setup(args) -> dict:
    """Torch's threads; for the default part, the demo corpus's index (in OUT/index, reused)."""
    torch_threads(args)
    demo = str(REPO / "examples" / "demo_corpus.jsonl")
    index = open_index(args.out, corpus=demo, progress=False)[0] if args.part != "costs" else None
    return {"args": args, "index": index, "model": None, "llm": None}


def costs(args, name: str) -> dict:
    import torch

    from nlqo.runtime.llm.local import TransformersLLM

    model = get_bundled(name)
    row: dict = {"gguf_bytes": model.size, "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    row["load_avg_before"] = round(os.getloadavg()[0], 1)
    try:
        dest = resolve_model(name, cache_dir=args.fresh_cache).path  # converted now unless it was before
    except ModelNotAvailable as exc:  # its parts are not installed
        return {**row, "skipped": str(exc)}
    row["conversion_s"] = read_marker(dest).get("seconds")  # the conversion's own timing, kept in its marker
    row["converted_bytes"] = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
    start = time.perf_counter()
    llm = TransformersLLM.load(dest, name=model.name)
    row["load_s"] = round(time.perf_counter() - start, 2)
    row["parameters"] = sum(p.numel() for p in llm.model.parameters())
    # decode speed: prefill the prompt and the first token, then time pure decoding
    session = llm.session(llm.format_chat([ChatMessage("user", DECODE_PROMPT)]), special=False, cache_prefix=False)
    session.generate(max_tokens=1)
    decode = session.generate(max_tokens=args.decode_tokens).usage
    row["decode_tok_s"] = round(decode.generated_tokens / (decode.wall_ms / 1000), 2)
    # prefix reuse: time to first token of a question after the parse prompt's instruction and examples
    prefix = llm.format_chat(PARSE.messages(question="")[:-1], add_generation_prompt=False)
    prefix_ids = llm.encode(prefix)
    llm.clear_prefix_cache()
    warmup = llm.session(prefix, special=False)
    warmup.append(question_suffix(llm, QUESTIONS[0]))
    warmup.generate(max_tokens=1)  # fills the prefix cache
    cold, warm, suffix_tokens = [], [], []
    for i in range(args.repeat + 1):
        question = QUESTIONS[(i + 1) % len(QUESTIONS)] if i < args.repeat else QUESTIONS[1]
        ids = prefix_ids + llm.encode(question_suffix(llm, question))
        max_tokens = 1 if i < args.repeat else 24  # the last round checks the same answer either way
        plain, plain_tokens = llm.generate_ids(ids, max_tokens=max_tokens)
        session = llm.session(prefix, special=False)
        session.append(question_suffix(llm, question))
        cached = session.generate(max_tokens=max_tokens)
        if i < args.repeat:
            assert cached.usage.cached_prompt_tokens == len(prefix_ids), cached.usage
            suffix_tokens.append(len(ids) - len(prefix_ids))
            cold.append(plain.usage.wall_ms)
            warm.append(cached.usage.wall_ms)
    row.update(
        prefix_tokens=len(prefix_ids),
        question_tokens=round(statistics.mean(suffix_tokens), 1),
        ttft_cold_ms=round(statistics.median(cold), 1),
        ttft_cached_ms=round(statistics.median(warm), 1),
        identical_output=session.token_ids[len(ids) :] == plain_tokens,
        load_avg_after=round(os.getloadavg()[0], 1),
    )
    del llm, session, warmup
    gc.collect()
    return row


def default(context: dict, case: dict, model: str) -> dict:
    """The linear template on one demo question, and a parse of it, by ``model`` (kept loaded between cases)."""
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


def measure(context: dict, case: dict, model: str) -> dict:
    return costs(context["args"], model) if case["part"] == "costs" else default(context, case, model)


def cases(args) -> list[dict]:
    demo = QuestionSet.load(REPO / "examples" / "demo_questions.jsonl", limit=args.limit).questions
    out = [{"part": "costs"}] if args.part in ("costs", "all") else []
    if args.part in ("default", "all"):
        out += [{"part": "default", "question": q.id, "text": q.question, "gold": list(q.answers)} for q in demo]
    return out


def table(rows: list[dict], run: dict) -> str:
    lines = [
        f"Measured {rows[0]['measured_at'][:10]} on {run['cpus']} CPU cores, torch {rows[0]['torch']}, "
        "float32, greedy decoding. The load avg column is the 1-minute load average before / after "
        "each model: above 2, other jobs shared the two cores and the times are upper bounds. "
        "Regenerate with `python benchmarks/bench_models.py`.",
        "",
        "| model | params | GGUF | converted | conversion (once) | load | decode | prefix / question tokens | first token, cold | first token, prefix cached | saved | same output | threads | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['model']} | not installed | | | | | | | | | | | | |")
            continue
        cold, cached = r["ttft_cold_ms"], r["ttft_cached_ms"]
        lines.append(
            f"| {r['model']} | {r['parameters'] / 1e6:.0f} M | {r['gguf_bytes'] / 1e6:,.0f} MB | "
            f"{r['converted_bytes'] / 1e6:,.0f} MB | {r['conversion_s']} s | {r['load_s']} s | "
            f"{r['decode_tok_s']} tok/s | {r['prefix_tokens']} / {r['question_tokens']:g} | {cold / 1000:.2f} s | "
            f"{cached / 1000:.2f} s | {round(cold - cached, 1) / 1000:.2f} s ({round(cold / cached, 2)}x) | "
            f"{'yes' if r['identical_output'] else 'NO'} | {r['torch_threads']} | {r['load_avg_before']} / {r['load_avg_after']} |"
        )
    return "\n".join(lines)


def default_table(rows: list[dict], run: dict) -> str:
    out = [
        f"Measured {rows[0]['measured_at'][:10]} on {run['machine']}, {run['cpus']} cores (load average {rows[-1]['load']:.1f} "
        f"at the end), {len({r['question'] for r in rows})} demo questions over examples/demo_corpus.jsonl, linear "
        "template, k=3 hybrid (`python benchmarks/bench_models.py --part default`).",
        "",
        "| model | EM (linear) | s / question (linear) | generated tokens | valid IR from the parser | s / parse |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for m in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == m]
        mean = {k: statistics.mean(r[k] for r in rs) for k in ("em", "linear_s", "generated", "parse_s")}
        out.append(f"| {m} | {mean['em']:.2f} | {mean['linear_s']:.1f} | {mean['generated']:.0f} | {sum(r['ir_valid'] for r in rs)}/{len(rs)} | {mean['parse_s']:.1f} |")  # fmt: skip
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="models",
    blocks=(
        Block("docs/models.md", "bench-models", table, title="Local models", part="costs"),
        Block("docs/models.md", "default-model", default_table, part="default"),
    ),
    cases=cases,
    configs=lambda args: args.models,
    config_field="model",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--part", choices=("costs", "default", "all"), default="all"),
        Option.of("--models", nargs="*", default=[m.name for m in BUNDLED], help="bundled models (default: all)"),
        Option.of("--limit", type=int, default=8, help="default: the first LIMIT demo questions"),
        Option.of("--decode-tokens", type=int, default=48),
        Option.of("--repeat", type=int, default=3, help="questions timed with and without the cached prefix"),
        THREADS,
        Option.of("--fresh-cache", type=Path, help="convert into this (new) cache dir to time conversion from scratch"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

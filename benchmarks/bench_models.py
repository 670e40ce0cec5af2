"""Bundled local models: one-time conversion, load time, decode speed, and prefix-reuse savings.

For each installed bundled model: the GGUF -> safetensors conversion time (measured now when the
model is not converted yet, or with --fresh-cache; else read from the cache marker), the load
time, greedy decode tokens/s on a fixed prompt, and the time to first token of a question after
the parse prompt's instruction and examples (``nlqo.prompts.planning.PARSE``, a prefix the parser
reuses for every question), computed from scratch versus with the prefix's KV state reused from
the prefix cache (checking that both give the same tokens).

On a machine shared with other jobs, torch's default of one thread per core oversubscribes the
cores and decoding slows down several-fold; --threads 1 gives steadier numbers there.
"""

import gc
import os
import statistics
import time
from pathlib import Path

from nlqo.errors import ModelNotAvailable
from nlqo.eval.experiment import THREADS, Block, Experiment, Option, main, torch_threads
from nlqo.llm.base import ChatMessage
from nlqo.models import BUNDLED, bundled_dir, resolve_model
from nlqo.models.convert import is_converted, read_marker
from nlqo.models.parts import locate
from nlqo.prompts.planning import PARSE

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


def measure(args, case: dict, dtype: str) -> dict:
    import torch

    from nlqo.llm.local import TransformersLLM

    model = next(m for m in BUNDLED if m.name == case["name"])
    row: dict = {"gguf_bytes": model.size, "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    row["load_avg_before"] = round(os.getloadavg()[0], 1)
    try:
        locate(model)
    except ModelNotAvailable as exc:
        return {**row, "skipped": str(exc)}
    dest = bundled_dir(model, args.fresh_cache)
    if is_converted(dest):
        row["conversion_s"] = read_marker(dest).get("seconds")
    else:
        start = time.perf_counter()
        resolve_model(model.name, cache_dir=args.fresh_cache)
        row["conversion_s"] = round(time.perf_counter() - start, 1)
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


def table(rows: list[dict], run: dict) -> str:
    lines = [
        f"Measured {run['started'][:10]} on {run['cpus']} CPU cores, torch {rows[0]['torch']}, "
        "float32, greedy decoding. The load avg column is the 1-minute load average before / after "
        "each model: above 2, other jobs shared the two cores and the times are upper bounds. "
        "Regenerate with `python benchmarks/bench_models.py`.",
        "",
        "| model | params | GGUF | converted | conversion (once) | load | decode | prefix / question tokens | first token, cold | first token, prefix cached | saved | same output | threads | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['name']} | not installed | | | | | | | | | | | | |")
            continue
        cold, cached = r["ttft_cold_ms"], r["ttft_cached_ms"]
        lines.append(
            f"| {r['name']} | {r['parameters'] / 1e6:.0f} M | {r['gguf_bytes'] / 1e6:,.0f} MB | "
            f"{r['converted_bytes'] / 1e6:,.0f} MB | {r['conversion_s']} s | {r['load_s']} s | "
            f"{r['decode_tok_s']} tok/s | {r['prefix_tokens']} / {r['question_tokens']:g} | {cold / 1000:.2f} s | "
            f"{cached / 1000:.2f} s | {round(cold - cached, 1) / 1000:.2f} s ({round(cold / cached, 2)}x) | "
            f"{'yes' if r['identical_output'] else 'NO'} | {r['torch_threads']} | {r['load_avg_before']} / {r['load_avg_after']} |"
        )
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="models",
    blocks=(Block("docs/models.md", "bench-models", table, title="Local models"),),
    about=__doc__,
    cases=lambda args: [{"name": name} for name in args.models],
    key=("name",),
    configs=lambda args: ["float32"],
    config_field="dtype",
    setup=torch_threads,
    measure=measure,
    options=(
        Option.of("--models", nargs="*", default=[m.name for m in BUNDLED]),
        Option.of("--decode-tokens", type=int, default=48),
        Option.of("--repeat", type=int, default=3, help="questions timed with and without the cached prefix"),
        THREADS,
        Option.of("--fresh-cache", type=Path, help="convert into this (new) cache dir to time conversion from scratch"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

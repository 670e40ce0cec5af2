"""Bundled local models: one-time conversion, load time, decode speed, and prefix-reuse savings.

For each installed bundled model: the GGUF -> safetensors conversion time (measured now when the
model is not converted yet, or with --fresh-cache; else read from the cache marker), the load
time, greedy decode tokens/s on a fixed prompt, and the time to first token of a question
after a ~400-token instruction + two few-shot examples, computed from scratch versus with the
prefix's KV state reused from the prefix cache (checking that both give the same tokens).
Records in benchmarks/results/models/, the table in docs/models.md.

    python benchmarks/bench_models.py [--models NAME ...] [--decode-tokens 48] [--repeat 3] [--threads N] [--fresh-cache DIR]

On a machine shared with other jobs, torch's default of one thread per core oversubscribes the
cores and decoding slows down several-fold; --threads 1 gives steadier numbers there.
"""

from __future__ import annotations

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

DECODE_PROMPT = "Write a detailed paragraph about the history of the city of Paris."
INSTRUCTION = (
    "You decompose a multi-hop question into a chain of simple sub-questions. Each sub-question asks "
    "for exactly one fact and can be answered by looking up a single encyclopedia passage. Later "
    "sub-questions may refer to the answers of earlier ones as #1, #2 and so on. Write one "
    "sub-question per line, numbered, and nothing else. Do not answer the questions. Do not add "
    "explanations. When a question compares two entities, ask for the compared property of each "
    "entity separately and then ask for the comparison. When a question asks about a property of an "
    "entity that is only described indirectly, first ask for the entity, then for the property. "
    "Keep the names exactly as they are written in the question, including titles, years and "
    "qualifiers, because the sub-questions are sent to a search engine one by one. Never merge two "
    "facts into one sub-question, never ask a yes/no question except for the final comparison, and "
    "never repeat a sub-question that was already asked. The last sub-question must produce the "
    "answer to the original question."
)
EXAMPLES = (
    (
        "Which country is the birthplace of the director of the film that won the Palme d'Or in 1994?",
        "1. Which film won the Palme d'Or in 1994?\n2. Who directed #1?\n3. In which city was #2 born?\n"
        "4. In which country is #3?",
    ),
    (
        "Were the architect of the Sydney Opera House and the architect of the Guggenheim Museum "
        "Bilbao born in the same decade?",
        "1. Who was the architect of the Sydney Opera House?\n2. In which year was #1 born?\n"
        "3. Who was the architect of the Guggenheim Museum Bilbao?\n4. In which year was #3 born?\n"
        "5. Are #2 and #4 in the same decade?",
    ),
)
QUESTIONS = (
    "What is the capital of the country where the inventor of the telephone was born?",
    "Which river flows through the city where the author of Faust died?",
    "Is the university attended by the founder of Microsoft older than the university attended by the founder of Amazon?",
    "In which year did the band that recorded Abbey Road release their first album?",
)


def question_suffix(llm, question: str) -> str:
    """The chat-template text of one more user turn plus the assistant header."""
    with_q = llm.format_chat([ChatMessage("system", "S"), ChatMessage("user", question)])
    return with_q[len(llm.format_chat([ChatMessage("system", "S")], add_generation_prompt=False)) :]


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
    # prefix reuse: time to first token of a question after the few-shot prefix
    messages = [ChatMessage("system", INSTRUCTION)]
    messages += [ChatMessage(role, text) for q, a in EXAMPLES for role, text in (("user", q), ("assistant", a))]
    prefix = llm.format_chat(messages, add_generation_prompt=False)
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

"""Bundled local models: one-time conversion, load time, decode speed, and prefix-reuse savings.

For each installed bundled model: the GGUF -> safetensors conversion time (measured now when the
model is not converted yet, or with --fresh-cache; else read from the cache marker), the load
time, greedy decode tokens/s on a fixed prompt, and the time to first token of a question
after a ~400-token instruction + two few-shot examples, computed from scratch versus with the
prefix's KV state reused from the prefix cache (checking that both give the same tokens).
Writes benchmarks/results/models.json and the table in docs/models.md.

    python benchmarks/bench_models.py [--models NAME ...] [--decode-tokens 48] [--repeat 3] [--threads N] [--fresh-cache DIR]

On a machine shared with other jobs, torch's default of one thread per core oversubscribes the
cores and decoding slows down several-fold; --threads 1 gives steadier numbers there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

from nlqo.errors import ModelNotAvailable  # noqa: E402
from nlqo.llm.base import ChatMessage  # noqa: E402
from nlqo.models import BUNDLED, bundled_dir, resolve_model  # noqa: E402
from nlqo.models.convert import is_converted, read_marker  # noqa: E402
from nlqo.models.parts import locate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

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


def few_shot_prefix(llm) -> str:
    messages = [ChatMessage("system", INSTRUCTION)]
    for question, answer in EXAMPLES:
        messages += [ChatMessage("user", question), ChatMessage("assistant", answer)]
    return llm.format_chat(messages, add_generation_prompt=False)


def question_suffix(llm, question: str) -> str:
    """The chat-template text of one more user turn plus the assistant header."""
    with_q = llm.format_chat([ChatMessage("system", "S"), ChatMessage("user", question)])
    without = llm.format_chat([ChatMessage("system", "S")], add_generation_prompt=False)
    assert with_q.startswith(without)
    return with_q[len(without) :]


def bench_model(name: str, *, cache_dir: Path | None, decode_tokens: int, repeat: int) -> dict:
    from nlqo.llm.local import TransformersLLM

    model = next(m for m in BUNDLED if m.name == name)
    import torch

    row: dict = {"name": name, "gguf_bytes": model.size, "torch_threads": torch.get_num_threads()}
    row["load_avg_before"] = round(os.getloadavg()[0], 1)
    try:
        locate(model)
    except ModelNotAvailable as exc:
        return {**row, "skipped": str(exc)}
    dest = bundled_dir(model, cache_dir)
    if is_converted(dest):
        row["conversion_s"] = read_marker(dest).get("seconds")
        row["conversion_measured"] = "earlier (cache marker)"
    else:
        start = time.perf_counter()
        resolve_model(name, cache_dir=cache_dir)
        row["conversion_s"] = round(time.perf_counter() - start, 1)
        row["conversion_measured"] = "this run"
    row["converted_bytes"] = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())

    start = time.perf_counter()
    llm = TransformersLLM.load(dest, name=name)
    row["load_s"] = round(time.perf_counter() - start, 2)
    row["parameters"] = sum(p.numel() for p in llm.model.parameters())

    # decode speed: prefill the prompt and the first token, then time pure decoding
    session = llm.session(llm.format_chat([ChatMessage("user", DECODE_PROMPT)]), special=False, cache_prefix=False)
    first = session.generate(max_tokens=1)
    decode = session.generate(max_tokens=decode_tokens)
    row["decode_prompt_tokens"] = first.usage.prompt_tokens
    row["first_token_ms"] = round(first.usage.wall_ms, 1)
    row["decode_tokens"] = decode.usage.generated_tokens
    row["decode_tok_s"] = round(decode.usage.generated_tokens / (decode.usage.wall_ms / 1000), 2)

    # prefix reuse: time to first token of a question after the few-shot prefix
    prefix = few_shot_prefix(llm)
    prefix_ids = llm.encode(prefix)
    cold, warm, suffix_tokens = [], [], []
    llm.clear_prefix_cache()
    warmup = llm.session(prefix, special=False)
    warmup.append(question_suffix(llm, QUESTIONS[0]))
    warmup.generate(max_tokens=1)  # fills the prefix cache
    for i in range(repeat):
        question = QUESTIONS[(i + 1) % len(QUESTIONS)]
        ids = prefix_ids + llm.encode(question_suffix(llm, question))
        suffix_tokens.append(len(ids) - len(prefix_ids))
        plain, _ = llm.generate_ids(ids, max_tokens=1)
        cold.append(plain.usage.wall_ms)
        session = llm.session(prefix, special=False)
        session.append(question_suffix(llm, question))
        cached = session.generate(max_tokens=1)
        assert cached.usage.cached_prompt_tokens == len(prefix_ids), cached.usage
        warm.append(cached.usage.wall_ms)
    # the same answer either way
    question = QUESTIONS[1]
    ids = prefix_ids + llm.encode(question_suffix(llm, question))
    _, plain_tokens = llm.generate_ids(ids, max_tokens=24)
    session = llm.session(prefix, special=False)
    session.append(question_suffix(llm, question))
    answer = session.generate(max_tokens=24)
    row.update(
        prefix_tokens=len(prefix_ids),
        question_tokens=round(statistics.mean(suffix_tokens), 1),
        ttft_cold_ms=round(statistics.median(cold), 1),
        ttft_cached_ms=round(statistics.median(warm), 1),
        identical_output=session.token_ids[len(ids) :] == plain_tokens,
        sample_answer=answer.text,
    )
    row["ttft_saved_ms"] = round(row["ttft_cold_ms"] - row["ttft_cached_ms"], 1)
    row["ttft_speedup"] = round(row["ttft_cold_ms"] / row["ttft_cached_ms"], 2)
    row["load_avg_after"] = round(os.getloadavg()[0], 1)
    del llm, session, warmup
    gc.collect()
    return row


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"Measured {result['generated_at'][:10]} on {m['cpus']} CPU cores, torch {m['torch']}, "
        "float32, greedy decoding. The load avg column is the 1-minute load average before / after "
        "each model: above 2, other jobs shared the two cores and the times are upper bounds. "
        "Regenerate with `python benchmarks/bench_models.py`.",
        "",
        "| model | params | GGUF | converted | conversion (once) | load | decode | prefix / question tokens | first token, cold | first token, prefix cached | saved | same output | threads | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["models"]:
        if "skipped" in r:
            lines.append(f"| {r['name']} | not installed | | | | | | | | | | | | |")
            continue
        lines.append(
            f"| {r['name']} | {r['parameters'] / 1e6:.0f} M | {r['gguf_bytes'] / 1e6:,.0f} MB | "
            f"{r['converted_bytes'] / 1e6:,.0f} MB | {r['conversion_s']} s | {r['load_s']} s | "
            f"{r['decode_tok_s']} tok/s | {r['prefix_tokens']} / {r['question_tokens']:g} | "
            f"{r['ttft_cold_ms'] / 1000:.2f} s | {r['ttft_cached_ms'] / 1000:.2f} s | "
            f"{r['ttft_saved_ms'] / 1000:.2f} s ({r['ttft_speedup']}x) | {'yes' if r['identical_output'] else 'NO'} | {r.get('torch_threads', '')} | {r['load_avg_before']} / {r['load_avg_after']} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=[m.name for m in BUNDLED])
    parser.add_argument("--decode-tokens", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, help="torch.set_num_threads(N) before measuring (default: torch's choice)"
    )
    parser.add_argument(
        "--fresh-cache", type=Path, help="convert into this (new) cache dir to time conversion from scratch"
    )
    parser.add_argument("--render-only", action="store_true", help="only rewrite the docs table from --out")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "models.json")
    parser.add_argument("--doc", type=Path, default=ROOT / "docs" / "models.md")
    args = parser.parse_args()

    if args.render_only:
        write_block(args.doc, "bench-models", markdown(json.loads(args.out.read_text())), title="Local models")
        return 0

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    machine = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    previous = json.loads(args.out.read_text()) if args.out.exists() else {"models": []}
    rows = {r["name"]: r for r in previous.get("models", [])}
    for name in args.models:
        print(f"== {name}", file=sys.stderr, flush=True)
        rows[name] = bench_model(name, cache_dir=args.fresh_cache, decode_tokens=args.decode_tokens, repeat=args.repeat)
        print(json.dumps(rows[name]), file=sys.stderr, flush=True)
    result = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "models": [rows[m.name] for m in BUNDLED if m.name in rows],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    write_block(args.doc, "bench-models", markdown(result), title="Local models")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Float32 vs dynamic int8 linear layers on a bundled model: prefill and decode speed, agreement.

Both variants run in this one process, one after the other on the same inputs, so the ratio is
what to quote on a noisy machine. "agreement" compares 24 greedy tokens of a chat answer, and
"chunking" whether prefilling a prompt in two pieces gives the same next tokens as prefilling it at
once (int8 computes activation scales per forward pass, so KV reuse is not bit-exact there).
Records in benchmarks/results/quantize/, the table in docs/models.md.

    python benchmarks/bench_quantize.py [--model qwen2.5-coder-1.5b] [--prefill 500] [--decode 16] [--threads N]
"""

from __future__ import annotations

import os
import time

import torch

from nlqo.config import DEFAULT_MODEL
from nlqo.eval.experiment import Block, Experiment, Option, main
from nlqo.llm.base import ChatMessage
from nlqo.models import load_transformers

QUESTION = "Which river flows through the capital of the country that hosted the 1992 Summer Olympics?"
CONTEXT = (
    "Barcelona hosted the 1992 Summer Olympics. Barcelona is the capital of Catalonia, an autonomous "
    "community of Spain. Madrid is the capital of Spain and the Manzanares river flows through it. "
)


def greedy(llm, ids: list[int], n: int, split: int | None = None) -> list[int]:
    """``n`` greedy tokens after ``ids``, prefilled at once or in two pieces at ``split``."""
    with torch.inference_mode():
        cache = llm._new_cache()
        if split:
            llm._forward(cache, ids[:split])
        logits = llm._forward(cache, ids[split or 0 :])
        out = []
        for _ in range(n):
            out.append(int(torch.argmax(logits)))
            logits = llm._forward(cache, [out[-1]])
    return out


def setup(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    return args


def measure(args, case: dict, quantize: str) -> dict:
    llm = load_transformers(case["model"], quantize=quantize, progress=False)
    filler = llm.encode(CONTEXT * 200)[: args.prefill]
    with torch.inference_mode():
        llm._forward(llm._new_cache(), filler[:32])  # warm-up
        cache = llm._new_cache()
        t = time.perf_counter()
        llm._forward(cache, filler)
        prefill_s = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(args.decode):
            llm._forward(cache, [filler[0]])
        decode_s = (time.perf_counter() - t) / args.decode
    prompt = llm.encode(llm.format_chat([ChatMessage("system", CONTEXT), ChatMessage("user", QUESTION)]))
    answer = greedy(llm, prompt, 24)
    return {
        "prefill_tok_s": args.prefill / prefill_s,
        "decode_s_per_token": decode_s,
        "answer_ids": answer,
        "answer": llm.decode(answer),
        "same_when_prefilled_in_two_pieces": greedy(llm, prompt, 24, split=len(prompt) // 2) == answer,
        **{"torch": torch.__version__, "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0]},
    }


def table(rows: list[dict], run: dict) -> str:
    base = rows[0]
    lines = [
        f"Measured {run['started'][:10]} on {run['machine']}, {run['cpus']} cores, load average {base['load_average']:.1f}, "
        f"torch {base['torch']}, {base['threads']} threads, model `{base['model']}`, "
        f"{run['prefill']}-token prefill, {run['decode']} decode steps (`python benchmarks/bench_quantize.py`).",
        "",
        "| linear layers | prefill tok/s | decode s/token | speed-up prefill / decode | same 24-token answer as float32 | same tokens when prefilled in two pieces | answer |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        speed = f"{r['prefill_tok_s'] / base['prefill_tok_s']:.2f}x / {base['decode_s_per_token'] / r['decode_s_per_token']:.2f}x"
        answer = r["answer"].split("<|")[0].replace("\n", " ").replace("|", "/").strip()  # up to the end-of-turn marker
        same = "yes" if r["answer_ids"] == base["answer_ids"] else "no"
        chunked = "yes" if r["same_when_prefilled_in_two_pieces"] else "no"
        name = "float32" if r["quantize"] == "none" else r["quantize"]
        lines.append(f"| {name} | {r['prefill_tok_s']:.1f} | {r['decode_s_per_token']:.3f} | {speed} | {same} | {chunked} | {answer} |")  # fmt: skip
    return "\n".join(lines)


EXPERIMENT = Experiment(
    name="quantize",
    blocks=(Block("docs/models.md", "bench-quantize", table),),
    about=__doc__,
    cases=lambda args: [{"model": args.model}],
    key=("model",),
    configs=lambda args: ["none", "int8"],
    config_field="quantize",
    setup=setup,
    measure=measure,
    options=(
        Option.of("--model", default=DEFAULT_MODEL, help="model (default: the engine's, %(default)s)"),
        Option.of("--prefill", type=int, default=500, help="prompt tokens timed at once"),
        Option.of("--decode", type=int, default=16, help="decode steps timed"),
        Option.of("--threads", type=int, help="torch threads (default: torch's)"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

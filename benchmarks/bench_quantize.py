"""Float32 vs dynamic int8 linear layers on a bundled model: prefill and decode speed, agreement.

    python benchmarks/bench_quantize.py [--model qwen2.5-coder-1.5b] [--prefill 500] [--decode 16] [--threads N]

Both variants run in this one process, one after the other on the same inputs, so the ratio is
what to quote on a noisy machine. "agreement" compares 24 greedy tokens of a chat answer, and
"chunking" whether prefilling a prompt in two pieces gives the same next tokens as prefilling it at
once (int8 computes activation scales per forward pass, so KV reuse is not bit-exact there).
Writes benchmarks/results/quantize.json and the table in docs/models.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

from nlqo.llm.base import ChatMessage  # noqa: E402
from nlqo.models import load_transformers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
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
            logits = llm._forward(cache, ids[split:])
        else:
            logits = llm._forward(cache, ids)
        out = []
        for _ in range(n):
            out.append(int(torch.argmax(logits)))
            logits = llm._forward(cache, [out[-1]])
    return out


def measure(model: str, quantize: str, prefill: int, decode: int) -> dict:
    llm = load_transformers(model, quantize=quantize, progress=False)
    filler = llm.encode((CONTEXT * 200))[:prefill]
    with torch.inference_mode():
        llm._forward(llm._new_cache(), filler[:32])  # warm-up
        cache = llm._new_cache()
        t = time.perf_counter()
        llm._forward(cache, filler)
        prefill_s = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(decode):
            llm._forward(cache, [filler[0]])
        decode_s = (time.perf_counter() - t) / decode
    prompt = llm.encode(llm.format_chat([ChatMessage("system", CONTEXT), ChatMessage("user", QUESTION)]))
    answer = greedy(llm, prompt, 24)
    return {
        "quantize": quantize,
        "prefill_tok_s": prefill / prefill_s,
        "decode_s_per_token": decode_s,
        "answer_ids": answer,
        "answer": llm.decode(answer),
        "same_when_prefilled_in_two_pieces": greedy(llm, prompt, 24, split=len(prompt) // 2) == answer,
    }


def table(rows: list[dict], meta: dict) -> str:
    base = rows[0]
    lines = [
        f"Measured {meta['date']} on {meta['machine']}, torch {meta['torch']}, {meta['threads']} threads, model `{meta['model']}`, "
        f"{meta['prefill']}-token prefill, {meta['decode']} decode steps (`python benchmarks/bench_quantize.py`).",
        "",
        "| linear layers | prefill tok/s | decode s/token | speed-up prefill / decode | same 24-token answer as float32 | same tokens when prefilled in two pieces | answer |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        speed = f"{r['prefill_tok_s'] / base['prefill_tok_s']:.2f}x / {base['decode_s_per_token'] / r['decode_s_per_token']:.2f}x"
        answer = r["answer"].split("<|")[0].replace("\n", " ").replace("|", "/").strip()  # up to the end-of-turn marker
        same = "yes" if r["answer_ids"] == base["answer_ids"] else "no"
        lines.append(
            f"| {'float32' if r['quantize'] == 'none' else r['quantize']} | {r['prefill_tok_s']:.1f} | {r['decode_s_per_token']:.3f} | {speed} | {same} | {'yes' if r['same_when_prefilled_in_two_pieces'] else 'no'} | {answer} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--prefill", type=int, default=500)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [measure(args.model, q, args.prefill, args.decode) for q in ("none", "int8")]
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": args.model,
        "prefill": args.prefill,
        "decode": args.decode,
    }
    out = ROOT / "benchmarks" / "results" / "quantize.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    write_block(ROOT / "docs" / "models.md", "bench-quantize", table(rows, meta))
    print(table(rows, meta))


if __name__ == "__main__":
    main()

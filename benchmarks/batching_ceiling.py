"""How much can concurrent requests gain on this machine's llama.cpp runtime? (issue 40)

Times one prompt's prefill, then four completions one after another against the same four at once
(the runtime decodes concurrent requests in one batch). Prompts of the size `nlqo serve` sends for a
one-retrieval answer (about 600 tokens, 32 generated). Prefill is compute-bound, so batching gains
only on the decode share: this ratio bounds what the service's concurrency can add.

    python benchmarks/batching_ceiling.py --model smollm2-135m
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import time
from pathlib import Path

from nlqo.models import load_local

HERE = Path(__file__).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "serve" / "batching.json")
    args = parser.parse_args()
    prompts = [f"Story number {i}. " + "The history of the city. " * 100 for i in range(4)]
    with load_local(args.model, runtime="llama-cpp", progress=False) as llm:
        llm.complete(prompts[0], max_tokens=1)  # warm up
        start = time.perf_counter()
        first = llm.complete(prompts[1], max_tokens=1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for p in prompts:
            llm.complete(p, max_tokens=32)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            list(pool.map(lambda p: llm.complete(p, max_tokens=32), prompts))
        together = time.perf_counter() - start
    row = {
        "model": args.model,
        "prompt_tokens": first.usage.prompt_tokens,
        "prefill_seconds": round(prefill, 3),
        "four_sequential_seconds": round(sequential, 3),
        "four_at_once_seconds": round(together, 3),
        "prefill_share": round(4 * prefill / sequential, 3),
        "batching_gain": round(sequential / together, 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(row, indent=2) + "\n")
    print(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()

"""How much can concurrent requests gain on this machine's llama.cpp runtime? (issue 40)

Times one prompt's prefill, then four completions one after another against the same four at once
(the runtime decodes concurrent requests in one batch). Prompts of the size `nlqo serve` sends for a
one-retrieval answer (about 600 tokens, 32 generated). Prefill is compute-bound, so batching gains
only on the decode share: this ratio bounds what the service's concurrency can add. Records in
benchmarks/results/batching/, the table in docs/serving.md.

    python benchmarks/batching_ceiling.py [--models smollm2-135m]
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from nlqo.eval.experiment import Block, Experiment, Option, main
from nlqo.models import load_local


def measure(args, case: dict, model: str) -> dict:
    prompts = [f"Story number {i}. " + "The history of the city. " * 100 for i in range(case["prompts"])]
    with load_local(model, runtime="llama-cpp", progress=False) as llm, ThreadPoolExecutor(len(prompts)) as pool:
        llm.complete(prompts[0], max_tokens=1)  # warm up
        t = [time.perf_counter()]
        first = llm.complete(prompts[1], max_tokens=1)
        t.append(time.perf_counter())
        [llm.complete(p, max_tokens=32) for p in prompts]
        t.append(time.perf_counter())
        list(pool.map(lambda p: llm.complete(p, max_tokens=32), prompts))
        t.append(time.perf_counter())
    prefill, sequential, together = (b - a for a, b in zip(t, t[1:]))
    return {
        **{"prompt_tokens": first.usage.prompt_tokens, "prefill_seconds": round(prefill, 3)},
        **{"sequential_seconds": round(sequential, 3), "at_once_seconds": round(together, 3)},
        "prefill_share": round(len(prompts) * prefill / sequential, 3),
        "batching_gain": round(sequential / together, 3),
    }


def table(records: list[dict], run: dict) -> str:
    rows = [
        "| model | prompt tokens | prefill s | four one after another s | four at once s | prefill share | batching gain |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows += [
        f"| {r['model']} | {r['prompt_tokens']} | {r['prefill_seconds']} | {r['sequential_seconds']} | "
        f"{r['at_once_seconds']} | {r['prefill_share']:.0%} | {r['batching_gain']}x |"
        for r in records
    ]
    return "\n".join(rows)


EXPERIMENT = Experiment(
    name="batching",
    blocks=(Block("docs/serving.md", "batching-ceiling", table),),
    about=__doc__,
    cases=lambda args: [{"prompts": 4}],
    key=("prompts",),
    configs=lambda args: args.models,
    config_field="model",
    measure=measure,
    options=(Option.of("--models", nargs="+", default=["smollm2-135m"], help="models (default: %(default)s)"),),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

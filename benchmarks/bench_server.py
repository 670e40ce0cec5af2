"""Serving: tree execution on a model server with several slots, one slot, and the in-process runtime,
and ``nlqo serve`` under load.

Backends: the in-process llama.cpp runtime, and llama.cpp's server with N slots (scripts/serve-llama.sh;
build it with scripts/build-llama-server.sh). Parts (``--part``), each described by its table: ``ask``,
``nlqo ask --strategy tree`` on a hand-written branching plan (``--ir``, so no parsing varies), parallel
and ``--sequential``; ``wave``, 4 equal requests together and one by one, for three shapes; ``ceiling``
(in-process only, issue 40): what batching can add when prefill is compute-bound. ``all`` is these three.
``nlqo serve`` under load is benchmarks/bench_load.py.
"""

import contextlib
import json
import os
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nlqo.eval.experiment import REPO, Block, Experiment, Option, free_port, load_average, main, run_nlqo, serving
from nlqo.runtime.llm.openai_compat import OpenAICompatLLM
from nlqo.runtime.models import load_local

WORK = REPO / ".nlqo" / "bench-server"
QUESTION = "Who was born first: Ada Lovelace, Charles Babbage, Marie Curie or Frederic Chopin?"
PEOPLE = ("Ada Lovelace", "Charles Babbage", "Marie Curie", "Frederic Chopin")
IR = "\n".join(
    [f'question "{QUESTION}"']
    + [f'q{i} = ("{p}", "born on", ?d{i})' for i, p in enumerate(PEOPLE, 1)]
    + [f'q{i + 4} = (?first, "born before", ?d{i})' for i in range(1, 5)]
    + [f"relation q{i} sibling q{i + 1}" for i in (1, 2, 3, 5, 6, 7)]
    + ["answer ?first", ""]
)
FILLER = "Ada Lovelace was an English mathematician born in London in 1815. Charles Babbage designed the Analytical Engine. Marie Curie was born in Warsaw in 1867. Frederic Chopin was born near Warsaw. "  # fmt: skip
SHAPES = {"node": (600, 24), "prefill": (600, 1), "decode": (12, 64)}  # (prompt tokens, about; generated)
IN_PROCESS = "in-process llama.cpp runtime (4 slots)"
NLQO = [sys.executable, "-m", "nlqo"]


def slots_of(backend: str) -> int | None:
    return int(match.group(1)) if (match := re.search(r"(\d+) slot", backend)) and "server" in backend else None


@contextlib.contextmanager
def serve(args, backend: str):
    """The model: in-process, or ``openai:MODEL@URL`` of scripts/serve-llama.sh on a free loopback port."""
    if (slots := slots_of(backend)) is None:
        yield args.model
        return
    port, log = free_port(), WORK / f"server-{slots}.log"
    cmd = ["sh", str(REPO / "scripts" / "serve-llama.sh"), "--slots", str(slots), "--threads", str(args.threads)]
    health = f"http://127.0.0.1:{port}/health"  # llama-server: 200 once the model is loaded
    with serving([*cmd, "--port", str(port), args.model], health, log, env={"PYTHON": sys.executable}):
        yield f"openai:{args.model}@http://127.0.0.1:{port}/v1"


def setup(args):
    server = Path(os.environ.get("LLAMA_SERVER", Path.home() / ".cache/nlqo/llama-server/bin/llama-server"))
    if args.slots and args.part in ("ask", "wave", "all") and not os.access(server, os.X_OK):
        raise SystemExit(f"{server} is not built: run scripts/build-llama-server.sh (llama-cpp-python's has one slot)")
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "plan.nlqo").write_text(IR, encoding="utf-8")
    if not (WORK / "index" / "manifest.json").is_file():
        run_nlqo("index", str(REPO / "examples" / "demo_corpus.jsonl"), "--out", str(WORK / "index"), "--quiet")
    return args


def ask(args, model: str) -> dict:
    common = ["--index", str(WORK / "index"), "--model", model, "--ir", str(WORK / "plan.nlqo")]
    common += ["--threads", str(args.threads), "-k", "2", "--quiet"]
    auto = json.loads(run_nlqo("explain", QUESTION, *common, "--strategy", "auto", "--format", "json")[0])["physical"]
    runs: dict[str, list[dict]] = {"parallel": [], "sequential": []}
    run_nlqo("ask", QUESTION, *common, "--strategy", "tree", "--json")  # warm-up: caches, page cache
    for i in range(args.repeats):
        for mode in ("parallel", "sequential")[:: 1 if i % 2 == 0 else -1]:
            out = json.loads(run_nlqo("ask", QUESTION, *common, "--strategy", "tree", "--json", *(["--sequential"] * (mode == "sequential")))[0])  # fmt: skip
            spans = [(s["started_ms"], s["started_ms"] + s["wall_ms"]) for s in out["trace"] if s["kind"] == "llm"]
            overlap = max((sum(1 for a, b in spans if a <= t < b) for t, _ in spans), default=0)
            runs[mode].append({"execution_s": round(out["stats"]["execution_ms"] / 1000, 2), "overlap": overlap, "answer": out["answer"]})  # fmt: skip
    median = {m: statistics.median(r["execution_s"] for r in rs) for m, rs in runs.items()}
    return {
        **{"auto_operator": auto["operator"], "auto_reason": auto["reason"]},
        **{"parallel_s": median["parallel"], "sequential_s": median["sequential"]},
        "speedup": round(median["sequential"] / median["parallel"], 3),
        "paired_speedups": [round(s["execution_s"] / p["execution_s"], 3) for p, s in zip(*runs.values())],
        "overlap_parallel": max(r["overlap"] for r in runs["parallel"]),
        "same_answer": len({r["answer"] for rs in runs.values() for r in rs}) == 1,
        "runs": runs,
    }


def seconds(llm, prompts: list[str], tokens: int, together: bool) -> float:
    """Wall seconds to complete ``prompts`` (``tokens`` each) sent at once, or one after another."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(prompts) if together else 1) as pool:
        list(pool.map(lambda prompt: llm.complete(prompt, max_tokens=tokens, stop=()), prompts))
    return time.perf_counter() - started


def wave(llm, shape: str, requests: int = 4, pairs: int = 3) -> dict:
    """``requests`` requests of one shape sent together and one by one, in ``pairs`` back to back
    (the order alternating); each starts with its own text, so no prefix cache serves it."""
    prompt_tokens, generated = SHAPES[shape]
    text = " ".join((FILLER * 40).split()[: int(prompt_tokens * 0.75)])
    prompts = lambda tag: [f"Request {tag}.{i}: {text}\nAnswer:" for i in range(requests)]  # noqa: E731
    llm.complete("Warm-up:", max_tokens=2)
    rows = []
    for i in range(pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        t = {at_once: seconds(llm, prompts(f"{shape}{i}{ab}"), generated, at_once) for at_once, ab in zip(order, "ab")}
        rows.append({"together_s": round(t[True], 2), "one_by_one_s": round(t[False], 2), "gain": round(t[False] / t[True], 3)})  # fmt: skip
    return {"pairs": rows, "gain": statistics.median(r["gain"] for r in rows)}


def ceiling(llm, model: str, n: int = 4, tokens: int = 32) -> dict:
    """One prompt's prefill, then ``n`` completions of the size `nlqo serve` sends for a one-retrieval
    answer (about 600 prompt tokens) one after another and at once (one batch in the runtime)."""
    prompts = [f"Story number {i}. " + "The history of the city. " * 100 for i in range(n)]
    llm.complete(prompts[0], max_tokens=1)  # warm-up
    started = time.perf_counter()
    first = llm.complete(prompts[1], max_tokens=1)
    prefill = time.perf_counter() - started
    sequential, together = seconds(llm, prompts, tokens, False), seconds(llm, prompts, tokens, True)
    return {
        **{"model": model, "prompts": n, "prompt_tokens": first.usage.prompt_tokens},
        **{"prefill_seconds": round(prefill, 3), "sequential_seconds": round(sequential, 3)},
        **{"at_once_seconds": round(together, 3), "prefill_share": round(n * prefill / sequential, 3)},
        "batching_gain": round(sequential / together, 3),
    }


def cases(args) -> list[dict]:
    return [{"part": p} for p in ("ask", "wave", "ceiling") if args.part in (p, "all")]


def measure(args, case: dict, backend: str) -> dict:
    with serve(args, backend) as model:
        if case["part"] == "ask":
            out = ask(args, model)
        else:
            name, _, url = model.removeprefix("openai:").partition("@")
            llm = load_local(model, threads=args.threads, progress=False) if not url else OpenAICompatLLM(url, name, timeout_s=900.0)  # fmt: skip
            out = ceiling(llm, args.model) if case["part"] == "ceiling" else {s: wave(llm, s) for s in SHAPES}
    return {**out, "load_after": load_average()}


def table(records: list[dict], run: dict) -> str:
    rows = sorted(records, key=lambda r: -(slots_of(r["backend"]) or 99))
    lines = [
        f"**`nlqo ask --strategy tree`** with `{run['model']}` on a branching plan (waves of 4, 4 and 1 nodes, `--ir`, top-2 passages, the demo corpus), {run['threads']} CPU threads per backend, median of {run['repeats']} runs each, parallel and `--sequential` alternating. Measured {run['started']} on {run['machine']}, {run['cpus']} cores under `nice -n 19` (the load average after each backend is in benchmarks/results/server/records.jsonl). `python benchmarks/bench_server.py`.",  # fmt: skip
        "",
        "| backend | tree, parallel s | tree, sequential s | speedup (medians) | paired speedups | LLM calls in flight at once | same answer both ways | auto chooses | auto's view of the backend |",  # fmt: skip
        "|---|---:|---:|---:|---|---:|---|---|---|",
    ]
    for r in (r for r in rows if r["part"] == "ask"):
        reason, paired = r["auto_reason"].split("(", 1)[-1].rstrip(")"), ", ".join(f"{x:.2f}" for x in r["paired_speedups"])  # fmt: skip
        lines.append(f"| {r['backend']} | {r['parallel_s']} | {r['sequential_s']} | {r['speedup']}x | {paired} | {r['overlap_parallel']} | {'yes' if r['same_answer'] else 'no'} | {r['auto_operator']} | {reason} |")  # fmt: skip
    lines += [
        "",
        "**One wave of 4 requests**, sent together vs one by one, back to back in pairs (order alternating), median of the pairs' gain (`--part wave`): `node` = a tree node's answer call (~600 prompt tokens, 24 generated), `prefill` = the same prompt with 1 token generated, `decode` = a short prompt and 64 tokens.",  # fmt: skip
        "",
        "| backend | node | prefill | decode | pairs (together s / one by one s) |",
        "|---|---:|---:|---:|---|",
    ]
    for w in (r for r in rows if r["part"] == "wave"):
        pairs = "; ".join(f"{s}: " + ", ".join(f"{p['together_s']}/{p['one_by_one_s']}" for p in w[s]["pairs"]) for s in SHAPES)  # fmt: skip
        lines.append(f"| {w['backend']} | {w['node']['gain']:.2f}x | {w['prefill']['gain']:.2f}x | {w['decode']['gain']:.2f}x | {pairs} |")  # fmt: skip
    return "\n".join(lines)


def ceiling_table(records: list[dict], run: dict) -> str:
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
    name="server",
    blocks=(
        Block("docs/backends.md", "server-benchmark", table),
        Block("docs/serving.md", "batching-ceiling", ceiling_table, part="ceiling"),
    ),
    cases=cases,
    configs=lambda args: (
        [IN_PROCESS] * args.in_process + [f"llama-server, {n} slot{'s' * (n > 1)}" for n in args.slots]
    ),
    config_field="backend",
    applies=lambda case, backend: case["part"] != "ceiling" or backend == IN_PROCESS,
    setup=setup,
    measure=measure,
    options=(
        Option.of("--model", default="smollm2-135m"),
        Option.of("--threads", type=int, default=2, help="CPU threads per backend"),
        Option.of("--slots", type=int, nargs="*", default=[4, 1], help="server slot counts (default: %(default)s)"),
        Option.of("--repeats", type=int, default=3),
        Option.of("--no-in-process", dest="in_process", action="store_false"),
        Option.of("--part", choices=("ask", "wave", "ceiling", "all"), default="all"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

"""Tree execution on a model server with several slots, one slot, and the in-process runtime.

    python benchmarks/bench_server.py                  # all backends; those already measured are kept
    python benchmarks/bench_server.py --force --repeats 3
    python benchmarks/bench_server.py --render

Part ``ask``: for each backend it runs ``nlqo ask --strategy tree`` on one hand-written branching plan (four
independent look-ups, four comparisons, the root: waves of 4, 4 and 1 nodes; ``--ir`` so that no
parsing varies) over the demo corpus, in parallel (the default: a wave's nodes sent together) and
with ``--sequential`` (one node at a time), alternating, ``--repeats`` times each, and reports the
median execution time and their ratio. It also records what ``auto`` chooses for that plan on the
backend (``nlqo explain --strategy auto --format json``: measured per-token costs, the server's
slots and batch gain), and the largest number of LLM calls in flight at the same time.

Part ``wave``: one wave of 4 equal requests sent together and one by one, back to back in pairs
(the order alternating), for three shapes (a tree node's answer call, the same prompt with one
token generated, a short prompt with 64 generated): how much running requests together gains,
and whether the gain is in prefill or in decoding. Short, paired measurements, so a busy machine
disturbs them less than whole ``ask`` runs.

Backends (all with ``--threads`` CPU threads, default 2):

* ``in-process``: nlqo's llama.cpp runtime (4 batched slots in one process);
* ``llama-server, N slots``: llama.cpp's own server with ``--parallel N`` (continuous batching),
  started by scripts/serve-llama.sh (build it with scripts/build-llama-server.sh), for N in ``--slots``.

Results: benchmarks/results/server.json and the block in docs/backends.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "server.json"
WORK = ROOT / ".nlqo" / "bench-server"
DOC = ROOT / "docs" / "backends.md"
MARKER = "server-benchmark"
QUESTION = "Who was born first: Ada Lovelace, Charles Babbage, Marie Curie or Frederic Chopin?"
IR = f'''question "{QUESTION}"
q1 = ("Ada Lovelace", "born on", ?d1)
q2 = ("Charles Babbage", "born on", ?d2)
q3 = ("Marie Curie", "born on", ?d3)
q4 = ("Frederic Chopin", "born on", ?d4)
q5 = (?first, "born before", ?d1)
q6 = (?first, "born before", ?d2)
q7 = (?first, "born before", ?d3)
q8 = (?first, "born before", ?d4)
relation q1 sibling q2
relation q2 sibling q3
relation q3 sibling q4
relation q5 sibling q6
relation q6 sibling q7
relation q7 sibling q8
answer ?first
'''


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PYTHON": sys.executable,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def serve(model: str, slots: int, threads: int):
    """scripts/serve-llama.sh on a free loopback port; yields the nlqo model name ``openai:MODEL@URL``."""
    port = free_port()
    log = open(WORK / f"server-{slots}.log", "w")
    process = subprocess.Popen(
        ["sh", str(ROOT / "scripts" / "serve-llama.sh"), "--slots", str(slots), "--threads", str(threads), "--port", str(port), model],
        env=env(), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not answers(f"http://127.0.0.1:{port}/health"):  # llama-server: 200 once the model is loaded
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {(WORK / f'server-{slots}.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield f"openai:{model}@http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def nlqo(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "nlqo", *args], env=env(), cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"nlqo {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def overlap(trace: list[dict]) -> int:
    """The most LLM calls that were running at the same moment."""
    spans = [(s["started_ms"], s["started_ms"] + s["wall_ms"]) for s in trace if s["kind"] == "llm"]
    return max((sum(1 for a, b in spans if a <= t < b) for t, _ in spans), default=0)


def measure_backend(model: str, index: Path, ir: Path, args) -> dict:
    common = [
        "--index",
        str(index),
        "--model",
        model,
        "--ir",
        str(ir),
        "--threads",
        str(args.threads),
        "-k",
        "2",
        "--quiet",
    ]
    explained = json.loads(nlqo("explain", QUESTION, *common, "--strategy", "auto", "--format", "json"))["physical"]
    runs: dict[str, list[dict]] = {"parallel": [], "sequential": []}
    nlqo("ask", QUESTION, *common, "--strategy", "tree", "--json")  # warm-up: caches, page cache
    for i in range(args.repeats):
        for mode in ("parallel", "sequential") if i % 2 == 0 else ("sequential", "parallel"):
            extra = ["--sequential"] if mode == "sequential" else []
            out = json.loads(nlqo("ask", QUESTION, *common, "--strategy", "tree", "--json", *extra))
            st = out["stats"]
            runs[mode].append({"execution_s": round(st["execution_ms"] / 1000, 2), "overlap": overlap(out["trace"]), "answer": out["answer"], "llm_calls": st["llm_calls"],
                               "generated_tokens": st["generated_tokens"], "computed_prompt_tokens": st["prompt_tokens"] - st["cached_prompt_tokens"]})  # fmt: skip
            print(f"  {mode}: {runs[mode][-1]}", file=sys.stderr, flush=True)
    median = {m: statistics.median(r["execution_s"] for r in rs) for m, rs in runs.items()}
    return {
        "date": now(),
        "auto_operator": explained["operator"],
        "auto_reason": explained["reason"],
        "waves": [len(w) for w in explained["waves"]],
        "parallel_s": median["parallel"],
        "sequential_s": median["sequential"],
        "speedup": round(median["sequential"] / median["parallel"], 3),
        "paired_speedups": [
            round(s["execution_s"] / p["execution_s"], 3) for p, s in zip(runs["parallel"], runs["sequential"])
        ],
        "overlap_parallel": max(r["overlap"] for r in runs["parallel"]),
        "same_answer": len({r["answer"] for rs in runs.values() for r in rs}) == 1,
        "runs": runs,
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


FILLER = (
    "Ada Lovelace was an English mathematician born in London in 1815. Charles Babbage designed the "
    "Analytical Engine. Marie Curie was born in Warsaw in 1867. Frederic Chopin was born near Warsaw. "
)
SHAPES = {"node": (600, 24), "prefill": (600, 1), "decode": (12, 64)}
"""Request shapes of a wave: (prompt tokens, about; generated tokens). ``node`` is a tree node's
answer call (top-k passages and the question, a short answer)."""


def wave_gain(llm, shape: str, *, requests: int = 4, pairs: int = 3) -> dict:
    """Wall time of ``requests`` requests of one shape sent together and sent one by one, in pairs
    run back to back (the order alternating), and the median of the pairs' ratios. Each request
    starts with its own text, so no prefix cache serves it."""
    from concurrent.futures import ThreadPoolExecutor

    prompt_tokens, generated = SHAPES[shape]
    words = (FILLER * 40).split()[: int(prompt_tokens * 0.75)]

    def prompts(tag: str) -> list[str]:
        return [f"Request {tag}.{i}: " + " ".join(words) + "\nAnswer:" for i in range(requests)]

    def together(tag: str) -> float:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=requests) as pool:
            list(pool.map(lambda p: llm.complete(p, max_tokens=generated, stop=()), prompts(tag)))
        return time.perf_counter() - started

    def one_by_one(tag: str) -> float:
        started = time.perf_counter()
        for p in prompts(tag):
            llm.complete(p, max_tokens=generated, stop=())
        return time.perf_counter() - started

    llm.complete("Warm-up:", max_tokens=2)
    rows = []
    for i in range(pairs):
        first, second = (together, one_by_one) if i % 2 == 0 else (one_by_one, together)
        a, b = first(f"{shape}{i}a"), second(f"{shape}{i}b")
        t, o = (a, b) if first is together else (b, a)
        rows.append({"together_s": round(t, 2), "one_by_one_s": round(o, 2), "gain": round(o / t, 3)})
    return {
        "shape": {"prompt_tokens": prompt_tokens, "generated_tokens": generated},
        "pairs": rows,
        "gain": statistics.median(r["gain"] for r in rows),
    }


def measure_waves(label: str, slots: int | None, args) -> dict:
    from nlqo.llm.openai_compat import OpenAICompatLLM
    from nlqo.models import load_local

    with contextlib.ExitStack() as stack:
        if slots is None:
            llm = load_local(args.model, threads=args.threads, progress=False)
        else:
            model = stack.enter_context(serve(args.model, slots, args.threads))
            name, _, url = model[len("openai:") :].partition("@")
            llm = OpenAICompatLLM(url, name, timeout_s=900.0)
        out = {}
        for shape in SHAPES:
            out[shape] = wave_gain(llm, shape)
            print(f"  wave {shape}: {out[shape]['gain']:.2f}x {out[shape]['pairs']}", file=sys.stderr, flush=True)
    return {**out, "date": now(), "load_after": [round(x, 2) for x in os.getloadavg()]}


def render(results: dict) -> str:
    lines = [
        f"**`nlqo ask --strategy tree`** with `{results['model']}` on a branching plan (waves of 4, 4 and 1 nodes, `--ir`, "
        f"top-2 passages, the demo corpus), {results['threads']} CPU threads per backend, median of {results['repeats']} runs "
        f"each, parallel and `--sequential` alternating. Measured {results['date']} on {results['machine']} under `nice -n 19` "
        "(the load average after each backend is in benchmarks/results/server.json). `python benchmarks/bench_server.py`.",
        "",
        "| backend | tree, parallel s | tree, sequential s | speedup (medians) | paired speedups | LLM calls in flight at once | same answer both ways | auto chooses | auto's view of the backend |",
        "|---|---:|---:|---:|---|---:|---|---|---|",
    ]
    for label, r in results.get("backends", {}).items():
        reason = (r.get("auto_reason") or "").split("(", 1)[-1].rstrip(")")
        paired = ", ".join(f"{x:.2f}" for x in r.get("paired_speedups", [])) or "-"
        lines.append(
            f"| {label} | {r['parallel_s']} | {r['sequential_s']} | {r['speedup']}x | {paired} | {r['overlap_parallel']} | {'yes' if r['same_answer'] else 'no'} | {r['auto_operator']} | {reason} |"
        )
    if results.get("waves"):
        lines += [
            "",
            "**One wave of 4 requests**, sent together vs one by one, back to back in pairs (order alternating), median of the "
            "pairs' gain (`--part wave`): `node` = a tree node's answer call (~600 prompt tokens, 24 generated), `prefill` = the "
            "same prompt with 1 token generated, `decode` = a short prompt and 64 tokens.",
            "",
            "| backend | node | prefill | decode | pairs (together s / one by one s) |",
            "|---|---:|---:|---:|---|",
        ]
        for label, w in results["waves"].items():
            pairs = "; ".join(
                f"{shape}: " + ", ".join(f"{p['together_s']}/{p['one_by_one_s']}" for p in w[shape]["pairs"])
                for shape in SHAPES
            )
            lines.append(
                f"| {label} | {w['node']['gain']:.2f}x | {w['prefill']['gain']:.2f}x | {w['decode']['gain']:.2f}x | {pairs} |"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--slots", default="4,1", help="server slot counts to measure (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-in-process", action="store_true")
    parser.add_argument("--force", action="store_true", help="measure backends already in the JSON again")
    parser.add_argument(
        "--part",
        choices=("ask", "wave", "all"),
        default="all",
        help="ask: nlqo ask side by side; wave: one wave of requests (default: both)",
    )
    parser.add_argument("--render", action="store_true")
    args = parser.parse_args()
    server = Path(
        os.environ.get("LLAMA_SERVER", Path.home() / ".cache" / "nlqo" / "llama-server" / "bin" / "llama-server")
    )
    if args.slots.strip() and not args.render and not os.access(server, os.X_OK):
        raise SystemExit(
            f"{server} is not built: run scripts/build-llama-server.sh (llama-cpp-python's server has one slot only)"
        )
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if not args.render:
        setup = {"model": args.model, "threads": args.threads, "repeats": args.repeats}
        if {k: results.get(k) for k in setup} != setup:
            results = {**setup, "backends": {}, "waves": {}}
        WORK.mkdir(parents=True, exist_ok=True)
        index, ir = WORK / "index", WORK / "plan.nlqo"
        ir.write_text(IR, encoding="utf-8")
        if not (index / "manifest.json").is_file():
            nlqo("index", str(ROOT / "examples" / "demo_corpus.jsonl"), "--out", str(index), "--quiet")
        backends: list[tuple[str, object]] = (
            [] if args.no_in_process else [("in-process llama.cpp runtime (4 slots)", None)]
        )
        backends += [
            (f"llama-server, {n} slot{'s' if n > 1 else ''}", n)
            for n in [int(x) for x in args.slots.split(",") if x.strip()]
        ]
        for label, slots in backends:
            if args.part in ("ask", "all") and (label not in results["backends"] or args.force):
                print(f"{label}:", file=sys.stderr, flush=True)
                with contextlib.ExitStack() as stack:
                    model = args.model if slots is None else stack.enter_context(serve(args.model, slots, args.threads))
                    results["backends"][label] = measure_backend(model, index, ir, args)
            if args.part in ("wave", "all") and (label not in results.setdefault("waves", {}) or args.force):
                print(f"{label}: one wave", file=sys.stderr, flush=True)
                results["waves"][label] = measure_waves(label, slots, args)
            results.update(date=now(), machine=f"{platform.machine()}, {os.cpu_count()} cores")
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    write_block(DOC, MARKER, render(results))
    print(f"wrote {RESULTS} and the block in {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

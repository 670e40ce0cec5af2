"""Scale-out on Dask: bench throughput and indexing speed, one process against a local cluster.

    python benchmarks/bench_cluster.py                    # both parts; configurations already measured are kept
    python benchmarks/bench_cluster.py --part bench --limit 6 --force
    python benchmarks/bench_cluster.py --part index --passages 400
    python benchmarks/bench_cluster.py --render           # only rewrite the docs block from the JSON

* **bench**: ``nlqo bench`` on the first ``--limit`` HotpotQA questions (index of the first
  ``--passages`` corpus passages, built once) with ``--strategies``, run as one process with 2 LLM
  threads, one process with 1 thread, and ``--cluster local:2`` (2 worker processes, 1 LLM thread
  each). Questions per minute over the run itself (from the moment ``run.json`` appears, i.e. after
  loading the model or starting the workers, to the end) and end to end; whether every
  configuration recorded the same answers.
* **index**: ``nlqo index`` of the first ``--passages`` passages, one process (2 and 1 torch threads)
  and ``--cluster local:1`` / ``local:2``; passages per second of the build (the line ``nlqo index``
  prints) and end to end (cluster start and model loading included).

Each configuration runs as its own command, one after the other, so the machine's load hits them
at different times: the JSON keeps the load average around each run. Results go to
benchmarks/results/cluster.json and the block in docs/scale-out.md; work folders to .nlqo/bench-cluster/.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results" / "cluster.json"
WORK = ROOT / ".nlqo" / "bench-cluster"
DOC = ROOT / "docs" / "scale-out.md"
MARKER = "cluster-benchmark"
BENCH_CONFIGS = {
    "1 process, 2 threads": ["--threads", "2"],
    "1 process, 1 thread": ["--threads", "1"],
    "local:2 (2 workers x 1 thread)": ["--cluster", "local:2"],
}
INDEX_CONFIGS = {
    "1 process, 2 threads": ["--threads", "2"],
    "1 process, 1 thread": ["--threads", "1"],
    "local:1 (1 worker x 1 thread)": ["--cluster", "local:1"],
    "local:2 (2 workers x 1 thread)": ["--cluster", "local:2"],
}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def nlqo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nlqo", *args]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def corpus_slice(passages: int) -> Path:
    """The first ``passages`` passages of the HotpotQA corpus, as a JSON Lines file."""
    path = WORK / f"hotpotqa_corpus_{passages}.jsonl"
    if not path.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        with gzip.open(DATA / "hotpotqa_dev_199_corpus.jsonl.gz", "rt", encoding="utf-8") as source:
            path.write_text("".join(itertools.islice(source, passages)), encoding="utf-8")
    return path


def timed(command: list[str], *, wait_for: Path | None = None) -> dict:
    """Run ``command``; its wall time, and the time until ``wait_for`` first existed."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    appeared = None
    while process.poll() is None:
        if appeared is None and wait_for is not None and wait_for.exists():
            appeared = time.perf_counter() - started
        time.sleep(0.1)
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{err[-3000:]}")
    return {
        "wall_s": round(time.perf_counter() - started, 2),
        "startup_s": None if appeared is None else round(appeared, 2),
        "stdout": out,
    }


def run_bench(args, results: dict) -> None:
    corpus = corpus_slice(args.passages)
    index = WORK / f"index-{args.passages}"
    if not (index / "manifest.json").is_file():
        timed(nlqo_command("index", str(corpus), "--out", str(index), "--quiet"))
    part = results.setdefault("bench", {})
    setup = {
        "questions": "hotpotqa_dev_199",
        "limit": args.limit,
        "passages": args.passages,
        "strategies": args.strategies,
        "model": args.model,
    }
    if part.get("setup") != setup:
        part.clear()
        part["setup"] = setup
    runs = part.setdefault("runs", {})
    for label, extra in BENCH_CONFIGS.items():
        if label in runs and not args.force:
            continue
        out = WORK / "bench" / re.sub(r"\W+", "-", label).strip("-")
        if out.exists():
            import shutil

            shutil.rmtree(out)
        print(f"bench: {label}", file=sys.stderr, flush=True)
        before = load()
        command = nlqo_command(
            "bench", "--questions", str(DATA / "hotpotqa_dev_199.jsonl.gz"), "--limit", str(args.limit), "--index", str(index),
            "--out", str(out), "--model", args.model, "--strategies", args.strategies, "--quiet", *extra,
        )  # fmt: skip
        t = timed(command, wait_for=out / "run.json")
        records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines() if line.strip()]
        run_s = t["wall_s"] - t["startup_s"]
        runs[label] = {
            "date": now(),
            "questions": args.limit,
            "records": len(records),
            "startup_s": t["startup_s"],
            "run_s": round(run_s, 2),
            "wall_s": t["wall_s"],
            "questions_per_min": round(args.limit / run_s * 60, 2),
            "questions_per_min_end_to_end": round(args.limit / t["wall_s"] * 60, 2),
            "mean_record_s": round(sum(r["seconds"] for r in records) / len(records), 2),
            "answers": {f"{r['qid']}|{r['strategy']}": r["answer"] for r in records},
            "load_before": before,
            "load_after": load(),
        }
        save(results)
    answers = [r["answers"] for r in runs.values()]
    part["same_answers"] = all(a == answers[0] for a in answers)


def run_index(args, results: dict) -> None:
    corpus = corpus_slice(args.passages)
    part = results.setdefault("index", {})
    setup = {"passages": args.passages, "embedder": "all-minilm-l6-v2", "batch_size": 64}
    if part.get("setup") != setup:
        part.clear()
        part["setup"] = setup
    runs = part.setdefault("runs", {})
    for label, extra in INDEX_CONFIGS.items():
        if label in runs and not args.force:
            continue
        print(f"index: {label}", file=sys.stderr, flush=True)
        before = load()
        out = WORK / "index" / re.sub(r"\W+", "-", label).strip("-")
        t = timed(nlqo_command("index", str(corpus), "--out", str(out), "--quiet", *extra))
        found = re.search(r"indexed (\d+) passages in ([\d.]+) s", t["stdout"])
        count, seconds = int(found.group(1)), float(found.group(2))
        runs[label] = {
            "date": now(),
            "passages": count,
            "build_s": seconds,
            "passages_per_s": round(count / seconds, 2),
            "wall_s": t["wall_s"],
            "passages_per_s_end_to_end": round(count / t["wall_s"], 2),
            "load_before": before,
            "load_after": load(),
        }
        save(results)


def save(results: dict) -> None:
    results["machine"] = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def render(results: dict) -> str:
    lines = []
    if "bench" in results:
        part = results["bench"]
        s = part["setup"]
        lines += [
            f"**Bench throughput**: `nlqo bench` with `{s['model']}`, strategies `{s['strategies']}`, the first {s['limit']} "
            f"HotpotQA questions over an index of the first {s['passages']} corpus passages "
            f"(`python benchmarks/bench_cluster.py --part bench`). Run = from `run.json` appearing (model loaded, "
            "workers started) to the end; start-up = before that. "
            f"Same answers in every configuration: {'yes' if part.get('same_answers') else 'NO'}.",
            "",
            "| configuration | questions/min (run) | questions/min (end to end) | start-up s | run s | mean s per record | load before / after |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for label, r in part["runs"].items():
            lines.append(
                f"| {label} | {r['questions_per_min']} | {r['questions_per_min_end_to_end']} | {r['startup_s']} | {r['run_s']} | "
                f"{r['mean_record_s']} | {', '.join(map(str, r['load_before']))} / {', '.join(map(str, r['load_after']))} |"
            )
        lines.append("")
    if "index" in results:
        part = results["index"]
        lines += [
            f"**Indexing**: `nlqo index` of the first {part['setup']['passages']} HotpotQA corpus passages with "
            f"`{part['setup']['embedder']}` (`python benchmarks/bench_cluster.py --part index`). Build = the time "
            "`nlqo index` reports (corpus, embedding, FAISS, BM25, atomic swap); end to end adds process start, "
            "cluster start and model loading.",
            "",
            "| configuration | passages/s (build) | passages/s (end to end) | build s | wall s | load before / after |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for label, r in part["runs"].items():
            lines.append(
                f"| {label} | {r['passages_per_s']} | {r['passages_per_s_end_to_end']} | {r['build_s']} | {r['wall_s']} | "
                f"{', '.join(map(str, r['load_before']))} / {', '.join(map(str, r['load_after']))} |"
            )
        lines.append("")
    m = results.get("machine", {})
    lines.append(
        f"Machine: {m.get('machine')}, {m.get('cpus')} cores, Python {m.get('python')}; every command under `nice -n 19`, the load averages around each run show what else ran."
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("bench", "index", "all"), default="all")
    parser.add_argument("--limit", type=int, default=6, help="questions (default: %(default)s)")
    parser.add_argument("--passages", type=int, default=300, help="corpus passages (default: %(default)s)")
    parser.add_argument("--strategies", default="standard-rag,ircot")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--force", action="store_true", help="measure configurations already in the JSON again")
    parser.add_argument("--render", action="store_true", help="only rewrite the docs block")
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    if not args.render:
        if args.part in ("bench", "all"):
            run_bench(args, results)
        if args.part in ("index", "all"):
            run_index(args, results)
        save(results)
    write_block(DOC, MARKER, render(results), title="Scale-out: Dask for batch work")
    print(f"wrote {RESULTS} and the block in {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

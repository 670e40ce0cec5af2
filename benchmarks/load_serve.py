#!/usr/bin/env python3
"""Load test of ``nlqo serve`` on loopback (issue 40): 1, 2, 4 and 8 concurrent clients.

For one model, side by side in one run:

1. ``nlqo ask --json`` in a new process per question, one at a time (what a user without the
   service does): its answers are the reference, its seconds the baseline;
2. ``nlqo serve`` on a free loopback port; at each concurrency level, the same questions sent by
   that many client threads, each question once. Every answer is compared with the same
   question's single-process answer (none lost, none duplicated, none different).

Writes JSON (throughput, p50/p95/p99 latency, errors, mismatches per level) and a plot.

    python benchmarks/load_serve.py --model smollm2-135m --index DIR --questions FILE [--limit 16]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import http.client
import json
import math
import re
import threading
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NLQO = [sys.executable, "-m", "nlqo"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument(
        "--questions", type=Path, required=True, help="a question file (JSON Lines, optionally gzipped)"
    )
    parser.add_argument("--limit", type=int, default=16, help="questions per level (default: %(default)s)")
    parser.add_argument("--levels", default="1,2,4,8", help="concurrent clients (default: %(default)s)")
    parser.add_argument(
        "--out", type=Path, default=HERE / "results" / "serve", help="results folder (default: %(default)s)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one request (default: %(default)s)")
    parser.add_argument(
        "--docs", type=Path, help="a markdown file whose load-test markers receive the table of every model in --out"
    )
    args = parser.parse_args(argv)
    questions = read_questions(args.questions, args.limit)
    levels = [int(x) for x in args.levels.split(",")]
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"{len(questions)} questions; nlqo ask, one process per question ...", file=sys.stderr)
    single, single_wall = ask_one_at_a_time(args, questions)
    report = {
        "model": args.model,
        "questions": len(questions),
        "single_process": summary(
            [s for _, s, _ in single.values()],
            single_wall,
            len(questions),
            errors=sum(1 for _, _, e in single.values() if e),
        ),
    }
    with Serving(args) as server:
        report["levels"] = {}
        for level in levels:
            print(f"serve: {level} concurrent clients ...", file=sys.stderr)
            report["levels"][str(level)] = run_level(server, questions, level, single, args.timeout)
        report["server_stats"] = server.get("/v1/stats")
    base = report["levels"].get("1", {}).get("throughput_per_s")
    for row in report["levels"].values():
        row["throughput_vs_1_client"] = round(row["throughput_per_s"] / base, 3) if base else None
    (args.out / f"load_{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(report, args.out / f"load_{name}.png")
    print(json.dumps(report, indent=2))
    if args.docs:
        page = args.docs.read_text(encoding="utf-8")
        head, rest = page.split(BEGIN, 1)
        args.docs.write_text(f"{head}{BEGIN}\n{table(args.out)}{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    return 0


BEGIN, END = "<!-- BEGIN load-test -->", "<!-- END load-test -->"


def table(folder: Path) -> str:
    """Markdown: every model's load test in ``folder``, one row per level."""
    rows = [
        "| model | clients | questions | errors | lost | duplicated | answers unlike `nlqo ask` | questions/s | vs 1 client | p50 s | p95 s | p99 s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted(folder.glob("load_*.json")):
        r = json.loads(path.read_text())
        s = r["single_process"]
        rows.append(
            f"| {r['model']} | `nlqo ask`, one process each | {s['requests']} | {s['errors']} | | | | {s['throughput_per_s']:.3f} | | {s['p50_s']} | {s['p95_s']} | {s['p99_s']} |"
        )
        for level, x in sorted(r["levels"].items(), key=lambda kv: int(kv[0])):
            rows.append(
                f"| {r['model']} | serve, {level} | {x['requests']} | {x['errors']} | {x['lost']} | {x['duplicated']} | {len(x['different_from_single_process'])} | {x['throughput_per_s']:.3f} | {x['throughput_vs_1_client']}x | {x['p50_s']} | {x['p95_s']} | {x['p99_s']} |"
            )
    return "\n".join(rows) + "\n"


def read_questions(path: Path, limit: int) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [{"id": r["id"], "question": r["question"]} for r in rows[:limit]]


def ask_one_at_a_time(args, questions) -> tuple[dict, float]:
    """qid -> (answer, seconds, error) from ``nlqo ask --json``, one process per question; and the wall time."""
    out, started = {}, time.monotonic()
    for q in questions:
        t = time.monotonic()
        done = subprocess.run(
            [*NLQO, "ask", q["question"], "--index", str(args.index), "--model", args.model, "--json", "--quiet"],
            capture_output=True,
            text=True,
            timeout=args.timeout,
        )
        seconds = time.monotonic() - t
        answer = json.loads(done.stdout)["answer"] if done.returncode == 0 else None
        out[q["id"]] = (answer, seconds, None if done.returncode == 0 else done.stderr.strip()[-300:])
    return out, time.monotonic() - started


class Serving:
    """``nlqo serve`` in a subprocess on a free loopback port."""

    def __init__(self, args):
        self.args = args

    def __enter__(self):
        cmd = [
            *NLQO,
            "serve",
            "--index",
            str(self.args.index),
            "--model",
            self.args.model,
            "--port",
            "0",
            "--queue",
            "64",
            "--timeout",
            str(self.args.timeout),
        ]
        self.process = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        for line in self.process.stderr:
            match = re.search(r"serving on http://([\d.]+):(\d+)", line)
            if match:
                self.address = (match.group(1), int(match.group(2)))
                break
        else:
            raise RuntimeError(f"nlqo serve did not start (exit {self.process.wait()})")
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # keep the pipe from filling
        return self

    def __exit__(self, *exc):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()

    def request(self, method: str, path: str, body=None, timeout: float = 600.0) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(*self.address, timeout=timeout)
        try:
            conn.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            conn.close()

    def get(self, path: str) -> dict:
        return self.request("GET", path)[1]


def run_level(server: Serving, questions, level: int, single: dict, timeout: float) -> dict:
    def one(q):
        t = time.monotonic()
        try:
            status, body = server.request("POST", "/v1/ask", {"question": q["question"]}, timeout=timeout)
        except OSError as exc:
            return q["id"], None, time.monotonic() - t, f"{type(exc).__name__}: {exc}"
        error = None if status == 200 else f"{status}: {body.get('error', {}).get('message', '')}"
        return q["id"], body.get("answer") if status == 200 else None, time.monotonic() - t, error

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(level) as pool:
        results = list(pool.map(one, questions))
    wall = time.monotonic() - started
    answered = [qid for qid, answer, _, error in results if error is None]
    row = summary(
        [s for _, _, s, _ in results], wall, len(questions), errors=sum(1 for r in results if r[3] is not None)
    )
    row["lost"] = len({q["id"] for q in questions} - set(answered))
    row["duplicated"] = len(answered) - len(set(answered))
    row["different_from_single_process"] = [
        qid for qid, answer, _, error in results if error is None and answer != single[qid][0]
    ]
    row["error_messages"] = sorted({r[3] for r in results if r[3]})[:5]
    return row


def summary(latencies: list[float], wall: float, n: int, *, errors: int) -> dict:
    ordered = sorted(latencies)

    def pct(q: float) -> float:  # nearest rank
        return round(ordered[max(1, math.ceil(len(ordered) * q / 100)) - 1], 3) if ordered else float("nan")

    return {
        "requests": n,
        "errors": errors,
        "wall_seconds": round(wall, 2),
        "throughput_per_s": round(n / wall, 4),
        "p50_s": pct(50),
        "p95_s": pct(95),
        "p99_s": pct(99),
    }


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    levels = sorted(report["levels"], key=int)
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    a.plot(
        [int(x) for x in levels], [report["levels"][x]["throughput_per_s"] for x in levels], "o-", label="nlqo serve"
    )
    a.axhline(report["single_process"]["throughput_per_s"], color="grey", ls="--", label="nlqo ask, one at a time")
    a.set(xlabel="concurrent clients", ylabel="questions / s", title=f"throughput, {report['model']}")
    a.legend(fontsize=8)
    for q in ("p50_s", "p95_s", "p99_s"):
        b.plot([int(x) for x in levels], [report["levels"][x][q] for x in levels], "o-", label=q[:-2])
    b.set(xlabel="concurrent clients", ylabel="seconds", title="latency")
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

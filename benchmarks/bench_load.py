"""``nlqo serve`` under load (issue 40; ``make load-serve``, in-process llama.cpp, loopback only).

``nlqo serve`` of each of ``--models`` on a free loopback port; the first ``--limit`` questions sent once per
level and run by that many client threads (levels interleaved across runs); every answer compared with the
same question's ``nlqo ask --json`` in a process of its own (level 0, once per model: the baseline and the
reference answers). The server's own count of finished requests (``/v1/stats``) says whether a request was
lost (sent, never finished) or run twice; the table gives each level's throughput as a mean of the runs with
a 95% t-interval, and its gain over one client paired by run.
"""

import atexit
import contextlib
import functools
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nlqo.config import DEFAULT_MODEL
from nlqo.eval.datasets import Question, QuestionSet
from nlqo.eval.experiment import Block, Experiment, Option, free_port, load, main, serving
from nlqo.eval.metrics import t_interval
from nlqo.serve.stats import percentile

NLQO = [sys.executable, "-m", "nlqo"]


class Load:
    """The run's questions, each model's reference answers and its ``nlqo serve`` (started once, stopped at exit)."""

    def __init__(self, args):
        if args.index is None or args.questions is None:
            raise SystemExit("bench_load.py: measuring needs --index and --questions (make load-serve gives both)")
        self.args, self.questions = args, QuestionSet.load(args.questions, limit=args.limit).questions
        baselines = [r for r in load(args.out)[0] if r["clients"] == 0]
        self.answers = {r["model"]: r.get("answers") for r in baselines}
        self.running = contextlib.ExitStack()
        atexit.register(self.running.close)

    @functools.cache
    def server(self, model: str) -> tuple[str, int]:
        """The address of ``model``'s ``nlqo serve``, started on a free loopback port on first use."""
        a, port = self.args, free_port()
        cmd = [*NLQO, "serve", "--index", str(a.index), "--model", model, "--port", str(port), "--queue", "64"]
        health, log = f"http://127.0.0.1:{port}/v1/health", Path(tempfile.gettempdir()) / f"nlqo-serve-{model}.log"
        self.running.enter_context(serving([*cmd, "--timeout", str(a.timeout)], health, log))
        return "127.0.0.1", port


def ask_once(load: Load, model: str, q: Question) -> tuple[str | None, str | None]:
    """One question in its own ``nlqo ask --json`` process: (answer, error)."""
    cmd = [*NLQO, "ask", q.question, "--index", str(load.args.index), "--model", model, "--json", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=load.args.timeout)
    return (json.loads(done.stdout)["answer"], None) if done.returncode == 0 else (None, done.stderr[-300:])


def server_finished(load: Load, model: str) -> int:
    """The asks the model's ``nlqo serve`` has finished, whatever their outcome (its ``/v1/stats``)."""
    conn = http.client.HTTPConnection(*load.server(model), timeout=30)
    try:
        conn.request("GET", "/v1/stats")
        counts = json.loads(conn.getresponse().read())["requests"]
    finally:
        conn.close()
    return sum(n for key, n in counts.items() if key.split()[0] == "ask")


def post(load: Load, model: str, q: Question) -> tuple[str | None, str | None]:
    """One question to the model's ``nlqo serve``: (answer, error)."""
    conn = http.client.HTTPConnection(*load.server(model), timeout=load.args.timeout)
    try:
        conn.request("POST", "/v1/ask", json.dumps({"question": q.question}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        status, body = response.status, json.loads(response.read() or b"{}")
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return (body.get("answer"), None) if status == 200 else (None, f"{status}: {body.get('error', {}).get('message')}")


def load_test(load: Load, case: dict, model: str) -> dict:
    send = ask_once if case["clients"] == 0 else post

    def timed(q):
        started = time.monotonic()
        return (q.id, *send(load, model, q), time.monotonic() - started)

    before = server_finished(load, model) if case["clients"] else 0
    started = time.monotonic()
    with ThreadPoolExecutor(max(1, case["clients"])) as pool:
        results = list(pool.map(timed, load.questions))
    wall, n = time.monotonic() - started, len(results)
    finished = server_finished(load, model) - before if case["clients"] else n
    ranks = {f"p{q}_s": round(percentile([r[3] for r in results], q), 3) for q in (50, 95, 99)}
    answered = [qid for qid, _, error, _ in results if error is None]
    row = {"requests": n, "errors": n - len(answered), "wall_seconds": round(wall, 2)}
    row |= {"throughput_per_s": round(n / wall, 4), **ranks, "latencies_s": [round(r[3], 3) for r in results]}
    if case["clients"] == 0:
        load.answers[model] = {qid: answer for qid, answer, _, _ in results}
        return {**row, "answers": load.answers[model]}
    reference = load.answers[model]
    different = [qid for qid, answer, error, _ in results if error is None and answer != reference[qid]]
    row["server_finished"] = finished
    row["lost"], row["duplicated"] = max(0, n - finished), max(0, finished - n)  # sent but never finished; run twice
    return {**row, "different_from_single_process": different, "error_messages": sorted({r[2] for r in results if r[2]})[:5]}  # fmt: skip


def mean_interval(values: list[float]) -> str:
    """``mean [low, high]``: the mean of the runs and its 95% t-interval (the mean alone for one run).

    >>> mean_interval([1.0, 2.0, 3.0]), mean_interval([0.25])
    ('2.000 [-0.484, 4.484]', '0.250')
    """
    if len(values) < 2:
        return f"{statistics.fmean(values):.3f}"
    t = t_interval(values)
    return f"{t.mean:.3f} [{t.low:.3f}, {t.high:.3f}]"


def load_table(records: list[dict], run: dict) -> str:
    rows = [
        f"Measured {run.get('started', '')[:10]} on {run.get('processor', '')}, {run.get('cpus', '')} cores, "
        f"in-process llama.cpp (4 slots), the first {run.get('limit', '')} HotpotQA dev questions per level and run "
        "(`make load-serve`).",
        "",
        "| model | clients | runs x questions | errors | lost | run twice | answers unlike `nlqo ask` | questions/s, mean [95% interval] | vs 1 client, paired by run | p50 s | p95 s |",  # fmt: skip
        "|---|---|---|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    runs: dict = {}
    for r in records:
        runs.setdefault((r["model"], r["clients"]), []).append(r)
    for (model, clients), group in sorted(runs.items()):
        seconds = sorted(s for r in group for s in r.get("latencies_s", [])) or [r["p50_s"] for r in group]
        ranks = f"{percentile(seconds, 50):.2f} | {percentile(seconds, 95):.2f}"
        rate = mean_interval([r["throughput_per_s"] for r in group])
        size = f"{len(group)} x {group[0]['requests']}"
        if clients == 0:
            rows.append(f"| {model} | `nlqo ask`, one process each | {size} | {sum(r['errors'] for r in group)} | | | | {rate} | | {ranks} |")  # fmt: skip
            continue
        one = {r["run"]: r["throughput_per_s"] for r in runs.get((model, 1), [])}
        gains = [r["throughput_per_s"] / one[r["run"]] for r in group if r["run"] in one]
        counts = " | ".join(str(sum(r[key] for r in group)) for key in ("errors", "lost", "duplicated"))
        unlike = sum(len(r["different_from_single_process"]) for r in group)
        rows.append(f"| {model} | serve, {clients} | {size} | {counts} | {unlike} | {rate} | {mean_interval(gains) + 'x' if gains else ''} | {ranks} |")  # fmt: skip
    return "\n".join(rows)


def cases(args) -> list[dict]:
    """Level 0 once per model, then every level once per run; the models' order alternates by level."""
    levels = enumerate((0, *[n for _ in range(args.runs) for n in args.levels]))
    return [
        {"clients": n, "model": m, **({"run": (i - 1) // len(args.levels)} if n else {})}
        for i, n in levels
        for m in args.models[:: 1 - 2 * (i % 2)]
    ]


EXPERIMENT = Experiment(
    name="server-load",
    blocks=(Block("docs/serving.md", "load-test", load_table),),
    cases=cases,
    setup=lambda args: Load(args),
    measure=lambda load, case, config: load_test(load, case, case["model"]),
    options=(
        Option.of("--models", nargs="+", default=["smollm2-135m", DEFAULT_MODEL], help="default: %(default)s"),
        Option.of("--index", type=Path, help="the index `nlqo serve` and `nlqo ask` use"),
        Option.of("--questions", type=Path, help="JSON Lines, optionally gzipped"),
        Option.of("--limit", type=int, default=16, help="questions per level and run (default: %(default)s)"),
        Option.of("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent clients"),
        Option.of("--runs", type=int, default=3, help="runs of each level (default: %(default)s)"),
        Option.of("--timeout", type=float, default=600.0, help="seconds for one request (default: %(default)s)"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

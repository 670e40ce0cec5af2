"""Load test of ``nlqo serve`` on loopback (issue 40): 1, 2, 4 and 8 concurrent clients.

For each model: ``nlqo ask --json`` in a new process per question, one at a time (case 0 clients:
the baseline, and the reference answers); then ``nlqo serve`` on a free loopback port, the same
questions sent by that many client threads, each once, every answer compared with the reference
(none lost, none duplicated, none different); ``make load-serve`` runs it.
"""

import atexit
import concurrent.futures
import contextlib
import functools
import http.client
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nlqo.eval.datasets import Question, QuestionSet
from nlqo.eval.experiment import Block, Experiment, Option, free_port, load, main, serving
from nlqo.serve.stats import percentile

NLQO = [sys.executable, "-m", "nlqo"]


class Load:
    """The run's questions, each model's reference answers and its ``nlqo serve`` (started once, stopped at exit)."""

    def __init__(self, args):
        self.args, self.questions = args, QuestionSet.load(args.questions, limit=args.limit).questions
        self.answers = {r["model"]: r.get("answers") for r in load(args.out)[0] if r["clients"] == 0}
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


def ask(load: Load, model: str, q: Question) -> tuple[str | None, str | None]:
    """One question in its own ``nlqo ask --json`` process: (answer, error)."""
    cmd = [*NLQO, "ask", q.question, "--index", str(load.args.index), "--model", model, "--json", "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=load.args.timeout)
    return (json.loads(done.stdout)["answer"], None) if done.returncode == 0 else (None, done.stderr[-300:])


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


def measure(load: Load, case: dict, model: str) -> dict:
    send = ask if case["clients"] == 0 else post

    def timed(q):
        started = time.monotonic()
        return (q.id, *send(load, model, q), time.monotonic() - started)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(1, case["clients"])) as pool:
        results = list(pool.map(timed, load.questions))
    wall, n = time.monotonic() - started, len(results)
    ranks = {f"p{q}_s": round(percentile([r[3] for r in results], q), 3) for q in (50, 95, 99)}
    answered = [qid for qid, _, error, _ in results if error is None]
    row = {"requests": n, "errors": n - len(answered), "wall_seconds": round(wall, 2)}
    row |= {"throughput_per_s": round(n / wall, 4), **ranks}
    if case["clients"] == 0:
        load.answers[model] = {qid: answer for qid, answer, _, _ in results}
        return {**row, "answers": load.answers[model]}
    reference = load.answers[model]
    different = [qid for qid, answer, error, _ in results if error is None and answer != reference[qid]]
    row |= {
        "lost": len({q.id for q in load.questions} - set(answered)),
        "duplicated": len(answered) - len(set(answered)),
    }
    return {**row, "different_from_single_process": different, "error_messages": sorted({r[2] for r in results if r[2]})[:5]}  # fmt: skip


def table(records: list[dict], run: dict) -> str:
    rows = [
        "| model | clients | questions | errors | lost | duplicated | answers unlike `nlqo ask` | questions/s | vs 1 client | p50 s | p95 s | p99 s |",  # fmt: skip
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r["model"]: r["throughput_per_s"] for r in records if r["clients"] == 1}
    for r in sorted(records, key=lambda r: (r["model"], r["clients"])):
        tail = f"{r['throughput_per_s']:.3f} | {{}}| {r['p50_s']} | {r['p95_s']} | {r['p99_s']} |"
        if r["clients"] == 0:
            rows.append(f"| {r['model']} | `nlqo ask`, one process each | {r['requests']} | {r['errors']} | | | | " + tail.format(""))  # fmt: skip
        else:
            gain = f"{round(r['throughput_per_s'] / base[r['model']], 3)}x " if r["model"] in base else ""
            counts = f"{r['requests']} | {r['errors']} | {r['lost']} | {r['duplicated']} | {len(r['different_from_single_process'])}"  # fmt: skip
            rows.append(f"| {r['model']} | serve, {r['clients']} | {counts} | " + tail.format(gain))
    return "\n".join(rows)


EXPERIMENT = Experiment(
    name="serve",
    blocks=(Block("docs/serving.md", "load-test", table),),
    cases=lambda args: [{"clients": n} for n in (0, *args.levels)],
    configs=lambda args: args.models,
    config_field="model",
    setup=Load,
    measure=measure,
    options=(
        Option.of("--models", nargs="+", default=["smollm2-135m"], help="models compared (default: %(default)s)"),
        Option.of("--index", type=Path, help="the index `nlqo serve` and `nlqo ask` use"),
        Option.of("--questions", type=Path, help="JSON Lines, optionally gzipped"),
        Option.of("--limit", type=int, default=16, help="questions per level (default: %(default)s)"),
        Option.of("--levels", type=int, nargs="+", default=[1, 2, 4, 8], help="concurrent clients"),
        Option.of("--timeout", type=float, default=600.0, help="seconds for one request (default: %(default)s)"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

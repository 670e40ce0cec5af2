"""Wall seconds of `nlqo ask` against the execution seconds it reports: the fixed costs of a command
(start-up, imports, loading the model, the embedder and the index, the backend profile, exit).

Issue 54's target: on the demo's one-fact question with the default model, wall <= execution + 5 s on a
warm machine. Warm: one untimed call first (the page cache holds the model, the backend profile is
cached); then ``--repeat`` timed calls, each a new process as a user runs it.
"""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nlqo.config import DEFAULT_MODEL
from nlqo.eval.experiment import Block, Experiment, Option, main

NLQO = str(Path(sys.executable).with_name("nlqo"))
QUESTIONS = {"one-fact": "Who wrote The Hobbit?", "multi-hop": "In which city was the author of The Hobbit born?"}
MARGIN_S = 5.0
"""Issue 54's target: wall seconds at most the execution's plus this."""


def measure(args, case: dict, model: str) -> dict:
    command = [NLQO, "ask", QUESTIONS[case["question"]], "--index", str(args.index), "--model", model, "--json"]
    subprocess.run(command, check=True, capture_output=True)  # warm
    walls, executions, answers = [], [], set()
    for _ in range(args.repeat):
        started = time.perf_counter()
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        reply = json.loads(done.stdout)
        executions.append((reply["stats"]["planning_ms"] + reply["stats"]["execution_ms"]) / 1000)
        answers.add(reply["answer"])
    overhead = [w - e for w, e in zip(walls, executions)]
    return {
        "wall_s": round(statistics.median(walls), 2),
        "execution_s": round(statistics.median(executions), 2),
        "overhead_s": round(statistics.median(overhead), 2),
        "overheads_s": [round(o, 2) for o in overhead],
        "answers": sorted(answers),
    }


def table(rows: list[dict], run: dict) -> str:
    out = [
        f"Measured {run['started'][:10]} on {run.get('cpu', run['processor'])}, {run['cpus']} cores (load average {run['load_average'][0]:.1f} "
        f"at the start), medians of {run['repeat']} warm calls, each a new process (`python benchmarks/bench_ask_wall.py`). "
        "Execution = planning + execution as `nlqo ask` reports them; fixed = wall - execution (start-up, imports, "
        "loads, exit).",
        "",
        "| question | model | wall s | execution s | fixed s (each call) | target: fixed <= | answer |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    out += [
        f"| {r['question']} | {r['model']} | {r['wall_s']:.2f} | {r['execution_s']:.2f} | {r['overhead_s']:.2f} "
        f"({', '.join(f'{o:.2f}' for o in r['overheads_s'])}) | {MARGIN_S:g} | {' / '.join(r['answers'])} |"
        for r in rows
    ]
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="ask-wall",
    blocks=(Block("docs/models.md", "ask-wall", table, title="Models"),),
    cases=lambda args: [{"question": q} for q in QUESTIONS],
    configs=lambda args: args.models,
    config_field="model",
    measure=measure,
    options=(
        Option.of("--repeat", type=int, default=5, help="timed calls per question; medians are reported"),
        Option.of("--index", type=Path, default=Path(".nlqo/demo-index"), help="the index (default: %(default)s)"),
        Option.of("--models", nargs="+", default=[DEFAULT_MODEL, "smollm2-135m"], help="default: %(default)s"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

"""Wall seconds of `nlqo plan` on the example IR files, default and structural cost models, warm.

A whole command, as a user runs it: start-up, imports, the cost model, the search and printing. Warm:
one untimed run first fills the similarity term's vector cache (nlqo/runtime/embed_cache.py).
"""

import statistics
import subprocess
import sys
import time
from pathlib import Path

from nlqo.eval.experiment import Block, Experiment, Option, main

NLQO = str(Path(sys.executable).with_name("nlqo"))
TARGETS = {"default": 2.0, "structural": 0.5}
"""Issue 51's targets: seconds on a 2-core machine."""


def measure(args, case: dict, config: str) -> dict:
    command = [NLQO, "plan", str(Path("examples") / case["file"]), "--cost-model", config]
    subprocess.run(command, check=True, capture_output=True)  # warm
    times = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return {"median_s": statistics.median(times), "max_s": max(times)}


def table(rows: list[dict], run: dict) -> str:
    out = [
        f"Measured {run['started'][:10]} on {run['processor']}, {run['cpus']} cores (load average {run['load_average'][0]:.1f} from other work), median of {run['repeat']} warm runs "
        "of the whole command (`python benchmarks/bench_plan_cli.py`).",
        "",
        "| file | cost model | median s | slowest s | target s |",
        "|---|---|---:|---:|---:|",
    ]
    out += [
        f"| {r['file']} | {r['cost_model']} | {r['median_s']:.2f} | {r['max_s']:.2f} | {TARGETS[r['cost_model']]} |"
        for r in rows
    ]
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="plan-cli",
    blocks=(Block("docs/optimizer.md", "plan-cli-benchmark", table, title="The optimizer"),),
    cases=lambda args: [{"file": p.name} for p in sorted(Path("examples").glob("*.nlqo"))],
    configs=lambda args: list(TARGETS),
    config_field="cost_model",
    measure=measure,
    options=(Option.of("--repeat", type=int, default=5, help="timed runs per file; the median is reported"),),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

"""`make fuzz`: the long fuzz campaign of issue 52 over every user-facing parser (tests/fuzzing.py).

Each target is fed its share of the inputs (at least 100,000 in all by default), drawn by hypothesis
from the same strategies and checked by the same property functions as tests/test_fuzz_parsers.py.
A broken contract does not stop the campaign: it is counted as an internal error, and the first few
inputs that broke it are kept. The counts go to benchmarks/results/fuzz.json and a table between the
fuzz-campaign markers of docs/reliability.md; the exit code is 1 when any input broke a contract.

    python scripts/fuzz.py                      # the campaign: 100,000 inputs
    python scripts/fuzz.py --inputs 2000 --targets ir,cost --no-write   # a quick look
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

import fuzzing  # noqa: E402
from nlqo.common.docblocks import write_block  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "fuzz.json"
DOCS = REPO / "docs" / "reliability.md"
BLOCK = "fuzz-campaign"
WEIGHTS = {"ir": 14, "ir-cli": 5, "cost": 12, "cost-cli": 5, "rules": 8, "rules-cli": 4, "statistics": 10,
           "relations": 8, "relations-cli": 4, "manifest": 7, "manifest-cli": 3, "questions": 10, "questions-cli": 4, "http": 8}  # fmt: skip
"""Shares of the inputs, by target: fewer for the slower paths through the CLI and the service."""
KEPT = 5
"""Inputs kept per target that broke its contract."""


def campaign(target: fuzzing.Target, count: int, rng_seed: int) -> dict:
    """Feed ``target`` ``count`` inputs; its counts, by generator and by outcome."""
    by_generator: collections.Counter = collections.Counter()
    outcomes: collections.Counter = collections.Counter()
    broken: list[dict] = []

    @seed(rng_seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(target.inputs())
    def run(tagged):
        generator, data = tagged
        by_generator[generator] += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                outcomes[target.feed(data)] += 1
        except Exception as exc:  # noqa: BLE001 - a broken contract is counted, and the campaign goes on
            outcomes["internal"] += 1
            if len(broken) < KEPT:
                broken.append({"input": repr(data)[:2000], "error": f"{type(exc).__name__}: {exc}"[:2000],
                               "where": traceback.format_exc(limit=-3)[-2000:]})  # fmt: skip

    started = time.monotonic()
    run()
    return {
        "what": target.what,
        "inputs": sum(by_generator.values()),
        "by_generator": dict(sorted(by_generator.items())),
        "outcomes": {k: outcomes.get(k, 0) for k in ("result", "error", "timeout", "internal")},
        "seconds": round(time.monotonic() - started, 1),
        "broken": broken,
    }


def table(report: dict) -> str:
    rows = ["| parser | inputs | by generator | result | located error | internal error |", "|---|---|---|---|---|---|"]
    for name, r in report["targets"].items():
        gens = ", ".join(f"{g} {n:,}" for g, n in r["by_generator"].items())
        o = r["outcomes"]
        ok = f"{o['result']:,}" + (f" (+{o['timeout']:,} timeouts)" if o["timeout"] else "")
        rows.append(f"| {r['what']} | {r['inputs']:,} | {gens} | {ok} | {o['error']:,} | {o['internal']:,} |")
    t = report["total"]
    rows.append(f"| **all** | **{t['inputs']:,}** | | {t['result']:,} | {t['error']:,} | **{t['internal']:,}** |")
    head = (f"`make fuzz` (scripts/fuzz.py, seed {report['seed']}, {report['minutes']:.0f} minutes on this machine, "
            f"hypothesis {report['hypothesis']}): inputs per parser and how each ended.")  # fmt: skip
    return head + "\n\n" + "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=int(os.environ.get("NLQO_FUZZ_INPUTS", 100_000)),
                        help="inputs in all, shared by the targets' weights (default: $NLQO_FUZZ_INPUTS or 100,000)")  # fmt: skip
    parser.add_argument("--targets", default=",".join(WEIGHTS), help="comma-separated target names (default: all)")
    parser.add_argument("--seed", type=int, default=52)
    parser.add_argument("--no-write", action="store_true", help="print the counts; write no results file or docs")
    args = parser.parse_args()
    names = [n for n in args.targets.split(",") if n]
    unknown = [n for n in names if n not in fuzzing.BY_NAME]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; the targets: {', '.join(fuzzing.BY_NAME)}")
    weight = sum(WEIGHTS[n] for n in names)
    import hypothesis

    started = time.monotonic()
    targets = {}
    for name in names:
        count = max(1, math.ceil(args.inputs * WEIGHTS[name] / weight))  # rounded up: at least --inputs in all
        print(f"fuzz: {name}: {count:,} inputs ...", file=sys.stderr, flush=True)
        targets[name] = campaign(fuzzing.BY_NAME[name], count, args.seed)
        r = targets[name]
        print(f"fuzz: {name}: {r['inputs']:,} inputs in {r['seconds']} s: {r['outcomes']}", file=sys.stderr, flush=True)
        for b in r["broken"]:
            print(f"  BROKEN {b['error'][:300]}\n    input: {b['input'][:300]}", file=sys.stderr)
    total = {k: sum(r["outcomes"][k] for r in targets.values()) for k in ("result", "error", "timeout", "internal")}
    total["inputs"] = sum(r["inputs"] for r in targets.values())
    report = {"seed": args.seed, "hypothesis": hypothesis.__version__, "minutes": (time.monotonic() - started) / 60,
              "total": total, "targets": targets}  # fmt: skip
    print(json.dumps(total), flush=True)
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        write_block(DOCS, BLOCK, table(report))
    return 1 if total["internal"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Planning time of the optimizer for 4 to 16 atoms on chain-, tree- and dense-shaped inputs.

Excludes LLM calls: pair relations are inferred from the triples or come from a fixed rule, and
the structural cost model needs no embedder. Writes benchmarks/results/planning.json and the
table in docs/optimizer.md.

    python benchmarks/bench_planning.py [--sizes 4 6 8 10 12 14 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import write_block  # noqa: E402

from nlqo.cost import load_cost_model  # noqa: E402
from nlqo.ir import Atom, Const, Query, Var  # noqa: E402
from nlqo.llm.base import Completion, Usage  # noqa: E402
from nlqo.optimizer import Optimizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def chain(n: int) -> Query:
    """q1 binds ?v1 from a constant, each next atom goes one hop further; the answer is the last."""
    atoms = [Atom("q1", Const("e0"), Const("r1"), Var("v1"))]
    atoms += [Atom(f"q{i}", Var(f"v{i - 1}"), Const(f"r{i}"), Var(f"v{i}")) for i in range(2, n + 1)]
    return Query(atoms=tuple(atoms), answer=Var(f"v{n}"))


def tree(n: int) -> Query:
    """A binary tree of variables: atom i links ?v(parent(i)) to ?v(i); siblings share their parent's variable."""
    atoms = [Atom(f"q{i}", Var(f"v{(i - 1) // 2}"), Const(f"r{i}"), Var(f"v{i}")) for i in range(1, n + 1)]
    return Query(atoms=tuple(atoms), answer=Var("v0"))


def dense(n: int) -> Query:
    """Every atom mentions the answer variable: all pairs are left to the (rule-based) classifier."""
    atoms = [Atom(f"q{i}", Var("x"), Const(f"r{i}"), Const(f"e{i}")) for i in range(1, n + 1)]
    return Query(atoms=tuple(atoms), answer=Var("x"))


class RulePairs:
    """Stands in for the LLM: q_i is q_j's parent when j - i is 1 or 2, siblings otherwise."""

    name = "rule"

    def chat(self, messages, *, stop=(), max_tokens=8):
        text = messages[-1].content
        a = int(re.search(r"\nA: .*?\br(\d+)\b", text).group(1))
        b = int(re.search(r"\nB: .*?\br(\d+)\b", text).group(1))
        kind = "parent" if b - a in (1, 2) else "child" if a - b in (1, 2) else "sibling"
        return Completion(kind, Usage(calls=1))


SHAPES = {"chain": chain, "tree": tree, "dense": dense}


def run(sizes: list[int], repeat: int) -> list[dict]:
    model = load_cost_model("structural")
    rows = []
    for shape, make in SHAPES.items():
        for n in sizes:
            query = make(n)
            times, plan = [], None
            for _ in range(repeat):
                optimizer = Optimizer(cost_model=model, llm=RulePairs(), rules=())
                started = time.perf_counter()
                plan = optimizer.optimize(query)
                times.append(time.perf_counter() - started)
            s = plan.stats
            rows.append(
                {
                    "shape": shape,
                    "atoms": n,
                    "median_ms": statistics.median(times) * 1000,
                    "min_ms": min(times) * 1000,
                    "method": s.method,
                    "subsets": s.subsets,
                    "pairs": s.pairs,
                    "candidates": s.candidates,
                    "cost": plan.cost.total,
                    "left_out": len(plan.left_out),
                }
            )
            print(f"{shape:6} {n:3} atoms  {rows[-1]['median_ms']:9.1f} ms  {s.method}  pairs={s.pairs}", flush=True)
    return rows


def table(rows: list[dict], meta: dict) -> str:
    out = [
        f"Measured {meta['date']} on {meta['machine']} (Python {meta['python']}), median of {meta['repeat']} runs, "
        "structural cost model, no LLM calls (`python benchmarks/bench_planning.py`).",
        "",
        "| shape | atoms | median ms | search | atom sets | sub-plan pairs | complete candidates |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['shape']} | {r['atoms']} | {r['median_ms']:.1f} | {r['method']} | {r['subsets']} | {r['pairs']} | {r['candidates']} |"
        )
    at14 = [r for r in rows if r["atoms"] == 14]
    if at14:
        worst = max(at14, key=lambda r: r["median_ms"])
        verdict = "meets" if worst["median_ms"] < 1000 else "misses"
        out += [
            "",
            f"Target: 14 atoms under 1 s. Slowest 14-atom shape: {worst['shape']}, {worst['median_ms']:.0f} ms ({verdict} the target).",
        ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8, 10, 12, 14, 16])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = run(args.sizes, args.repeat)
    meta = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "python": platform.python_version(),
        "repeat": args.repeat,
    }
    out = REPO / "benchmarks" / "results" / "planning.json"
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    write_block(REPO / "docs" / "optimizer.md", "planning-benchmark", table(rows, meta), title="The optimizer")
    print(f"wrote {out} and docs/optimizer.md")


if __name__ == "__main__":
    main()

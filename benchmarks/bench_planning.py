"""Planning time of the optimizer for 4 to 16 atoms on chain-, tree- and dense-shaped inputs.

No LLM calls: pair relations come from a fixed rule, and the structural cost model needs no embedder.
"""

import re
import statistics
import time

from nlqo.optimizer.cost import load_cost_model
from nlqo.eval.experiment import Block, Experiment, Option, main
from nlqo.ir import Atom, Const, Query, Var
from nlqo.runtime.llm.base import Completion, Usage
from nlqo.optimizer.optimizer import Optimizer
from nlqo.testing.strategies import chain, star  # needs nlqo[testing] (hypothesis)


def tree(n: int) -> Query:
    """A binary tree of variables: atom i links ?v(parent(i)) to ?v(i); siblings share their parent's variable."""
    atoms = [Atom(f"q{i}", Var(f"v{(i - 1) // 2}"), Const(f"p{i}"), Var(f"v{i}")) for i in range(1, n + 1)]
    return Query(atoms=tuple(atoms), answer=Var("v0"))


# dense: a star, every atom mentions the answer variable, so all pairs are left to the classifier
SHAPES = {"chain": chain, "tree": tree, "dense": star}


class RulePairs:
    """Stands in for the LLM: the atom with predicate p_i is p_j's parent when j - i is 1 or 2, siblings otherwise."""

    name = "rule"

    def chat(self, messages, *, stop=(), max_tokens=8):
        text = messages[-1].content
        a = int(re.search(r"\nA: .*?\bp(\d+)\b", text).group(1))
        b = int(re.search(r"\nB: .*?\bp(\d+)\b", text).group(1))
        kind = "parent" if b - a in (1, 2) else "child" if a - b in (1, 2) else "sibling"
        return Completion(kind, Usage(calls=1))


def measure(args, case: dict, config: str) -> dict:
    query, model = SHAPES[case["shape"]](case["atoms"]), load_cost_model(config)
    times = []
    for _ in range(args.repeat):
        optimizer = Optimizer(cost_model=model, llm=RulePairs(), rules=())
        started = time.perf_counter()
        plan = optimizer.optimize(query)
        times.append(time.perf_counter() - started)
    s = plan.stats
    return {
        "median_ms": statistics.median(times) * 1000,
        "min_ms": min(times) * 1000,
        **{"method": s.method, "subsets": s.subsets, "pairs": s.pairs, "candidates": s.candidates},
        **{"cost": plan.cost.total, "left_out": len(plan.left_out)},
    }


def table(rows: list[dict], run: dict) -> str:
    out = [
        f"Measured {run['started'][:10]} on {run['machine']}, {run['cpus']} cores (Python {run['python']}), median of "
        f"{run['repeat']} runs, structural cost model, no LLM calls (`python benchmarks/bench_planning.py`).",
        "",
        "| shape | atoms | median ms | search | atom sets | sub-plan pairs | complete candidates |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    out += [
        f"| {r['shape']} | {r['atoms']} | {r['median_ms']:.1f} | {r['method']} | {r['subsets']} | {r['pairs']} | {r['candidates']} |"
        for r in rows
    ]
    if at14 := [r for r in rows if r["atoms"] == 14]:
        worst = max(at14, key=lambda r: r["median_ms"])
        verdict = "meets" if worst["median_ms"] < 1000 else "misses"
        out += ["", f"Target: 14 atoms under 1 s. Slowest 14-atom shape: {worst['shape']}, {worst['median_ms']:.0f} ms ({verdict} the target)."]  # fmt: skip
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="planning",
    blocks=(Block("docs/optimizer.md", "planning-benchmark", table, title="The optimizer"),),
    cases=lambda args: [{"shape": s, "atoms": n} for s in SHAPES for n in args.sizes],
    configs=lambda args: ["structural"],
    config_field="cost_model",
    measure=measure,
    options=(
        Option.of("--sizes", type=int, nargs="+", default=[4, 6, 8, 10, 12, 14, 16], help="atoms per query"),
        Option.of("--repeat", type=int, default=3, help="runs per query; the median is reported"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

"""`auto` by statistics on the held-back questions of each dev set (issue 38), against the fixed operators.

Measures nothing by running a model: a case is a set, and its record is computed from two runs' records
(`make bench-statistics`' held-back run in benchmarks/results/statistics/SET/heldout, where auto ran on
every held-back question and iter-retgen beside it on the first 30; the benchmark of record's fixed
operators in benchmarks/results/runs/SET, joined by qid) and `nlqo analyze`'s statistics.json.
"""

import json
import statistics
from collections import Counter
from pathlib import Path

import numpy as np

from nlqo.eval.experiment import RESULTS, SETS, Block, Experiment, Option, main
from nlqo.eval.metrics import bootstrap_diff, wilson_interval
from nlqo.eval.records import operator_of, read_records

FIXED = ("standard-rag", "iter-retgen", "linear", "tree", "auto")
RECORDED = {"retrieve": "standard-rag", "iterate": "iter-retgen", "linear": "linear", "tree": "tree"}


def label(strategy: str) -> str:
    return "auto (structural, record)" if strategy == "auto" else f"{strategy} (record)"


def choice(record: dict) -> dict | None:
    return ((record.get("plan") or {}).get("physical") or {}).get("choice")


def mean(rows: list[dict], key: str) -> float:
    return sum(float(r[key]) for r in rows) / len(rows)


def measure(args, case: dict, config: str) -> dict:
    name = case["set"]
    stats = args.stats / name / "statistics.json"
    calibration = json.loads(stats.read_text(encoding="utf-8"))["operators"] if stats.exists() else {}
    held = read_records(args.stats / name / "heldout" / "records.jsonl")
    auto = {r["qid"]: r for r in held if r["strategy"] == "auto"}
    same_run = {r["qid"]: r for r in held if r["strategy"] == "iter-retgen"}
    recorded: dict[str, dict[str, dict]] = {}
    for r in read_records(args.runs / name / "records.jsonl"):
        recorded.setdefault(r["strategy"], {})[r["qid"]] = r
    qids = sorted(q for q in auto if all(q in recorded.get(s, {}) for s in FIXED))
    paired = [q for q in qids if q in same_run]
    rows = {"auto (statistics)": [auto[q] for q in qids]} | {label(s): [recorded[s][q] for q in qids] for s in FIXED}
    strategies = {k: {"n": len(v), "em": mean(v, "em"), "correct": sum(r["em"] for r in v), "seconds": mean(v, "seconds")} for k, v in rows.items() if v}  # fmt: skip
    best = max(FIXED, key=lambda s: strategies[label(s)]["em"]) if qids else None
    ours = rows["auto (statistics)"]
    gain = bootstrap_diff([r["em"] for r in ours], [r["em"] for r in rows[label(best)]], resamples=10000, seed=20261205) if qids else None  # fmt: skip
    same = [
        r["answer"] == recorded[RECORDED[op]][r["qid"]]["answer"] for r in ours if (op := operator_of(r)) in RECORDED
    ]
    return {
        "calibration": {op: calibration[op]["all"] for op in sorted(calibration)},
        "strategies": strategies,
        "best": best,
        "gain": None if gain is None else [gain.mean * 100, gain.low * 100, gain.high * 100],
        "ratio": mean([auto[q] for q in paired], "seconds") / mean([same_run[q] for q in paired], "seconds")
        if paired
        else None,  # fmt: skip
        "paired": len(paired),
        "same_answers": sum(same_run[q]["answer"] == recorded["iter-retgen"][q]["answer"] for q in paired),
        "q_errors": [c["q_error"] for r in ours if (c := choice(r)) and c.get("q_error")],
        "chosen": Counter(operator_of(r) or "?" for r in ours).most_common(),
        "replay": [sum(same), len(same)],
    }


def pareto(points: dict[str, tuple[float, float]]) -> set[str]:
    """Names no other point beats on EM (higher) and seconds (lower) at once."""
    return {n for n, p in points.items() if not any(q[0] >= p[0] and q[1] <= p[1] and q != p for q in points.values())}


def table(records: list[dict], run: dict) -> str:
    records = [r for r in records if r["strategies"]]
    out = ["| set | operator | class | n | EM % [95%] | supported % | s/question | LLM calls |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in records:
        for op, x in r["calibration"].items():
            out.append(
                f"| {r['set']} | {op} | all | {x['n']} | {x['em'] * 100:.1f} [{x['em_low'] * 100:.0f}, {x['em_high'] * 100:.0f}] | {x['supported'] * 100:.0f} | {x['seconds']:.1f} | {x['llm_calls']:.2f} |"  # fmt: skip
            )
    out += ["", "| set | n | strategy | EM % [95%] | s/question | on the Pareto front |", "|---|---|---|---|---|---|"]
    for r in records:
        front = pareto({k: (s["em"], s["seconds"]) for k, s in r["strategies"].items()})
        for k, s in r["strategies"].items():
            lo, hi = wilson_interval(s["correct"], s["n"])
            out.append(f"| {r['set']} | {s['n']} | {k} | {s['em'] * 100:.1f} [{lo * 100:.0f}, {hi * 100:.0f}] | {s['seconds']:.1f} | {'yes' if k in front else ''} |")  # fmt: skip
    out += [
        "",
        "| set | best fixed operator (record) | auto minus best, EM points [paired 95%] | auto s / iter-retgen s, same run (n) | iter-retgen answers equal to its record |",  # fmt: skip
        "|---|---|---|---|---|",
    ]
    for r in records:
        (d, lo, hi), ratio = r["gain"], float("nan") if r["ratio"] is None else r["ratio"]
        out.append(f"| {r['set']} | {r['best']} | {d:+.1f} [{lo:+.1f}, {hi:+.1f}] | {ratio:.2f} ({r['paired']}) | {r['same_answers']}/{r['paired']} |")  # fmt: skip
    out += ["", "| set | q-error median | q-error p90 | n |", "|---|---|---|---|"]
    out += [f"| {r['set']} | {statistics.median(q):.2f} | {np.percentile(q, 90):.2f} | {len(q)} |" for r in records if (q := r["q_errors"])]  # fmt: skip
    out += ["", "| set | operators auto chose | answers equal to the chosen operator's record |", "|---|---|---|"]
    out += [f"| {r['set']} | {', '.join(f'{k} {v}' for k, v in r['chosen'])} | {r['replay'][0]}/{r['replay'][1]} |" for r in records]  # fmt: skip
    return "\n".join(out)


EXPERIMENT = Experiment(
    name="statistics-report",
    blocks=(Block("docs/benchmarks.md", "statistics-report", table),),
    cases=lambda args: [{"set": name} for name in SETS],
    configs=lambda args: ["statistics"],
    config_field="auto",
    measure=measure,
    options=(
        Option.of("--runs", type=Path, default=RESULTS / "runs", help="the benchmark of record's run folders"),
        Option.of("--stats", type=Path, default=RESULTS / "statistics", help="make bench-statistics' output folder"),
    ),
)

if __name__ == "__main__":
    raise SystemExit(main(EXPERIMENT))

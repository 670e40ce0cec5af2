#!/usr/bin/env python3
"""Issue 38's report: `auto` by statistics on the held-back questions of each dev set.

Reads, per set, the held-back run of `make bench-statistics` (benchmarks/results/statistics/SET/heldout:
auto on every held-back question, iter-retgen interleaved with it on the first 30, for the ratio of
their seconds in one run) and the benchmark of record's per-question records of the fixed operators
on the same questions (benchmarks/results/runs/SET, joined by qid: standard-rag =
RETRIEVE, iter-retgen = ITERATE, linear = TEMPLATE, tree = TREE, and the structural auto of then).
Prints markdown: EM with Wilson intervals, seconds, auto minus the best fixed operator with a paired
bootstrap interval, the EM-seconds Pareto front, q-error of auto's time estimates, the operators auto
chose, and how often auto's answer equals the record of the operator it chose (the replay check).

    python benchmarks/statistics_report.py [--docs docs/benchmarks.md] [--details docs/experiments/issue-38-statistics.md]

With --docs the tables replace the text between the statistics-report markers of that file; with
--details the calibration table by question class goes between the statistics-calibration markers
of the other (the docs table has each operator over all classes).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from nlqo.docblocks import write_block

HERE = Path(__file__).resolve().parent
SETS = ("hotpotqa_dev_199", "2wiki_dev_300", "musique_dev_200")
FIXED = ("standard-rag", "iter-retgen", "linear", "tree", "auto")
RECORDED = {"retrieve": "standard-rag", "iterate": "iter-retgen", "linear": "linear", "tree": "tree"}
REPORT, CALIBRATION = "statistics-report", "statistics-calibration"
SEED, RESAMPLES = 20261205, 10000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=Path, default=HERE / "results" / "runs", help="the benchmark of record's run folders"
    )
    parser.add_argument(
        "--stats", type=Path, default=HERE / "results" / "statistics", help="make bench-statistics' output folder"
    )
    parser.add_argument("--docs", type=Path, help=f"a markdown file whose {REPORT} markers receive the tables")
    parser.add_argument(
        "--details", type=Path, help=f"a markdown file whose {CALIBRATION} markers receive the table by question class"
    )
    args = parser.parse_args(argv)
    text = report(args.runs, args.stats)
    if args.docs:
        write_block(args.docs, REPORT, text)
    else:
        sys.stdout.write(text)
    if args.details:
        write_block(args.details, CALIBRATION, "\n".join(calibration(args.stats, by_class=True)))
    return 0


def read(path: Path) -> list[dict]:
    return (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if path.exists()
        else []
    )


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p, den = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / den, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return centre - half, centre + half


def paired_diff(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Mean of a - b in points, with its percentile bootstrap 95% interval."""
    diff = np.array(a) - np.array(b)
    idx = np.random.default_rng(SEED).integers(0, len(diff), size=(RESAMPLES, len(diff)))
    means = diff[idx].mean(axis=1) * 100
    return float(diff.mean() * 100), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def pareto(points: dict[str, tuple[float, float]]) -> set[str]:
    """Names no other point beats on EM (higher) and seconds (lower) at once."""
    return {
        n
        for n, (em, s) in points.items()
        if not any(e2 >= em and s2 <= s and (e2, s2) != (em, s) for e2, s2 in points.values())
    }


def calibration(stats: Path, *, by_class: bool = False) -> list[str]:
    """What `nlqo analyze` measured on each set's first 50: per operator, and per question class too."""
    out = [
        "| set | operator | class | n | EM % [95%] | supported % | s/question | LLM calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in SETS:
        path = stats / name / "statistics.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))["operators"]
        for op in sorted(data):
            for kind in ("all", *sorted(k for k in data[op] if k != "all" and by_class)):
                x = data[op][kind]
                out.append(
                    f"| {name} | {op} | {kind} | {x['n']} | {x['em'] * 100:.1f} [{x['em_low'] * 100:.0f}, {x['em_high'] * 100:.0f}] | {x['supported'] * 100:.0f} | {x['seconds']:.1f} | {x['llm_calls']:.2f} |"
                )
    return out + [""]


def report(runs: Path, stats: Path) -> str:
    out = calibration(stats) + [
        "| set | n | strategy | EM % [95%] | s/question | on the Pareto front |",
        "|---|---|---|---|---|---|",
    ]
    gains, qerrors, chosen, replay = [], [], [], []
    for name in SETS:
        held = read(stats / name / "heldout" / "records.jsonl")
        auto = {r["qid"]: r for r in held if r["strategy"] == "auto"}
        same_run = {r["qid"]: r for r in held if r["strategy"] == "iter-retgen"}
        recorded: dict[str, dict[str, dict]] = {}
        for r in read(runs / name / "records.jsonl"):
            recorded.setdefault(r["strategy"], {})[r["qid"]] = r
        qids = sorted(q for q in auto if all(q in recorded.get(s, {}) for s in FIXED))
        paired = [q for q in qids if q in same_run]
        if not qids:
            continue
        rows = {"auto (statistics)": [auto[q] for q in qids]}
        rows |= {
            f"{s} (record)" if s != "auto" else "auto (structural, record)": [recorded[s][q] for q in qids]
            for s in FIXED
        }
        points = {k: (mean(v, "em"), mean(v, "seconds")) for k, v in rows.items()}
        front = pareto(points)
        for k, v in rows.items():
            lo, hi = wilson(sum(r["em"] for r in v), len(v))
            out.append(
                f"| {name} | {len(v)} | {k} | {points[k][0] * 100:.1f} [{lo * 100:.0f}, {hi * 100:.0f}] | {points[k][1]:.1f} | {'yes' if k in front else ''} |"
            )
        best = max(FIXED, key=lambda s: points[f"{s} (record)" if s != "auto" else "auto (structural, record)"][0])
        best_rows = rows[f"{best} (record)" if best != "auto" else "auto (structural, record)"]
        ratio = (
            mean([auto[q] for q in paired], "seconds") / mean([same_run[q] for q in paired], "seconds")
            if paired
            else float("nan")
        )
        same_answers = sum(same_run[q]["answer"] == recorded["iter-retgen"][q]["answer"] for q in paired)
        gains.append(
            (
                name,
                best,
                paired_diff([r["em"] for r in rows["auto (statistics)"]], [r["em"] for r in best_rows]),
                ratio,
                len(paired),
                same_answers,
            )
        )
        q = [c["q_error"] for r in rows["auto (statistics)"] if (c := choice(r)) and c.get("q_error")]
        qerrors.append((name, q))
        chosen.append((name, Counter(operator(r) or "?" for r in rows["auto (statistics)"])))
        same = [
            r["answer"] == recorded[RECORDED[op]][r["qid"]]["answer"]
            for r in rows["auto (statistics)"]
            if (op := operator(r)) in RECORDED
        ]
        replay.append((name, sum(same), len(same)))
    out += [
        "",
        "| set | best fixed operator (record) | auto minus best, EM points [paired 95%] | auto s / iter-retgen s, same run (n) | iter-retgen answers equal to its record |",
        "|---|---|---|---|---|",
    ]
    out += [
        f"| {n} | {b} | {d:+.1f} [{lo:+.1f}, {hi:+.1f}] | {ratio:.2f} ({k}) | {same}/{k} |"
        for n, b, (d, lo, hi), ratio, k, same in gains
    ]
    out += ["", "| set | q-error median | q-error p90 | n |", "|---|---|---|---|"]
    out += [f"| {n} | {statistics.median(q):.2f} | {np.percentile(q, 90):.2f} | {len(q)} |" for n, q in qerrors if q]
    out += ["", "| set | operators auto chose | answers equal to the chosen operator's record |", "|---|---|---|"]
    out += [
        f"| {n} | {', '.join(f'{k} {v}' for k, v in c.most_common())} | {s}/{t} |"
        for (n, c), (_, s, t) in zip(chosen, replay)
    ]
    return "\n".join(out) + "\n"


def mean(rows: list[dict], key: str) -> float:
    return sum(float(r[key]) for r in rows) / len(rows)


def choice(record: dict) -> dict | None:
    return ((record.get("plan") or {}).get("physical") or {}).get("choice")


def operator(record: dict) -> str | None:
    c = choice(record)
    return c["operator"] if c else record.get("operator")


if __name__ == "__main__":
    sys.exit(main())

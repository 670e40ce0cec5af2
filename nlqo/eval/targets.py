"""The benchmark's targets (issue 17), per run and across the data sets, from run summaries.

A run's other baselines (no-rag, ircot, self-ask) live in a sibling folder (``<run>-baselines``)
that covers the run's first questions; the targets compare the engine's strategies with them on
exactly those questions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

from nlqo.eval.metrics import bootstrap_diff
from nlqo.eval.records import read_records
from nlqo.eval.runner import RECORDS

BASELINE_NAMES = ("standard-rag", "iter-retgen", "ircot", "self-ask")
"""The retrieval baselines the targets compare ``auto`` with."""

ENGINE_NAMES = ("linear", "tree", "auto")
"""The engine's own strategies."""
COMPANION = "-baselines"
"""Suffix of the folder that holds a run's other baselines on its first questions (``make bench``)."""


def companion_results(folder: str | Path) -> dict[str, Any] | None:
    """The other baselines of ``folder`` (its ``-baselines`` sibling) and the engine's strategies of
    ``folder``, on the questions the sibling finished: ``{"n", "results": {name: {"em", "seconds"}},
    "differences": {(engine, baseline): paired EM interval}}``; a strategy's results also count its
    demonstration leaks (``"demo_leaks"``) when its records were checked for them."""
    main, other = Path(folder) / RECORDS, Path(str(folder).rstrip("/") + COMPANION) / RECORDS
    if not (main.is_file() and other.is_file()):
        return None
    theirs = read_records(other, repair=False)
    names = {r["strategy"] for r in theirs}
    finished: dict[str, set[str]] = {}
    for r in theirs:
        finished.setdefault(r["qid"], set()).add(r["strategy"])
    done = {qid for qid, strategies in finished.items() if strategies == names}
    mine = [r for r in read_records(main, repair=False) if r["strategy"] in ENGINE_NAMES and r["qid"] in done]
    if not done or len({r["qid"] for r in mine if r["strategy"] == "auto"}) < len(done):
        return None
    engine = [n for n in ENGINE_NAMES if len({r["qid"] for r in mine if r["strategy"] == n}) == len(done)]
    rows = {
        n: sorted((r for r in theirs if r["strategy"] == n and r["qid"] in done), key=lambda r: r["qid"])
        for n in sorted(names)
    }
    rows |= {n: sorted((r for r in mine if r["strategy"] == n), key=lambda r: r["qid"]) for n in engine}
    results = {
        n: {"em": sum(float(r["em"]) for r in rs) / len(rs), "seconds": sum(float(r["seconds"]) for r in rs) / len(rs)}
        for n, rs in rows.items()
    }
    for n, rs in rows.items():
        if any("demo_leak" in r for r in rs):  # records from before the check have no field
            results[n]["demo_leaks"] = sum(1 for r in rs if r.get("demo_leak"))
    differences = {
        (a, b): bootstrap_diff([float(r["em"]) for r in rows[a]], [float(r["em"]) for r in rows[b]])
        for a in engine
        for b in sorted(names)
    }
    return {"n": len(done), "results": results, "differences": differences}


def _points(diff: float, low: float | None = None, high: float | None = None) -> str:
    """An EM difference and its interval, if known, in points: ``+2.0 [-4.0, +8.0]`` (no ``-0.0``).

    >>> _points(-0.0, -0.24, 0.2), _points(0.04)
    ('+0.0 [-24.0, +20.0]', '+4.0')
    """
    if low is None or high is None:
        return f"{100 * diff + 0.0:+.1f}"
    return f"{100 * diff + 0.0:+.1f} [{100 * low + 0.0:+.1f}, {100 * high + 0.0:+.1f}]"


def targets(summary: dict[str, Any], companion: dict[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) rows of the benchmark's targets (issue 17) for one run;
    ``companion`` holds the other baselines on the run's first questions (:func:`companion_results`).

    >>> s = {"results": {"auto": {"em": 0.3, "seconds": 2.0}, "iter-retgen": {"em": 0.25, "seconds": 5.0}}}
    >>> [row[2] for row in targets(s)]
    ['met', 'met', 'met', 'met', 'not measured', 'not measured', 'not measured', 'not measured']
    """
    results = summary["results"]
    auto = results.get("auto")
    if auto is None:
        return [("auto is part of the run", "no auto results", "not measured")]
    rows = []
    top = best_of(results, ENGINE_NAMES) or "auto"
    for name, label in (("auto", "auto"), (top, f"best engine strategy ({top})")):
        mine = standing(summary, companion, name)
        rows.append(
            (
                f"{label} EM >= every baseline's",
                mine["text"],
                _verdict(mine["matches"]) if mine["compared"] else "not measured",
            )
        )
    baselines = {n: results[n] for n in BASELINE_NAMES if n in results and results[n]["em"] is not None}
    other: dict[str, Any] = companion or {"results": {}}
    theirs = {n: r for n, r in other["results"].items() if n not in ENGINE_NAMES}
    # (baseline, its results, auto's on the same questions)
    pool = [(n, r, auto) for n, r in baselines.items()]
    pool += [(f"{n} (first {other['n']})", r, other["results"]["auto"]) for n, r in theirs.items()]
    dominating = [n for n, r, ref in pool if r["em"] >= ref["em"] and r["seconds"] < ref["seconds"]]
    rows.append(("auto on the EM-vs-seconds Pareto front (no baseline as accurate and faster)",
                 "dominated by " + ", ".join(dominating) if dominating else f"{len(pool)} baselines, none dominates",
                 _verdict(not dominating) if pool else "not measured"))  # fmt: skip
    if "iter-retgen" in results and results["iter-retgen"]["seconds"]:
        ratio = auto["seconds"] / results["iter-retgen"]["seconds"]
        rows.append(
            (
                "auto s/question <= iter-retgen's",
                f"{_ratio(ratio, 1.0)} ({auto['seconds']:.2f} s vs {results['iter-retgen']['seconds']:.2f} s)",
                _verdict(ratio <= 1.0),
            )
        )
    else:
        rows.append(("auto s/question <= iter-retgen's", "no iter-retgen results", "not measured"))
    # ircot in the run itself ran beside auto on the same questions; the sibling's ircot ran hours apart
    ircot, mine, where = results.get("ircot"), auto, "in this run"
    if not (ircot and ircot["seconds"]):
        ircot, mine, where = (
            other["results"].get("ircot"),
            other["results"].get("auto"),
            f"on the first {other.get('n')}",
        )
    if ircot and ircot["seconds"] and mine:
        ratio = mine["seconds"] / ircot["seconds"]
        rows.append(
            (
                "auto s/question <= 0.5x ircot's",
                f"{_ratio(ratio, 0.5)} {where} ({mine['seconds']:.2f} s vs {ircot['seconds']:.2f} s)",
                _verdict(ratio <= 0.5),
            )
        )
    else:
        rows.append(("auto s/question <= 0.5x ircot's", "no ircot results beside this run", "not measured"))
    linear = results.get("linear")
    if linear and linear.get("retrievals") is not None:
        applies = not str(summary.get("dataset", "")).startswith("hotpotqa")
        rows.append(("linear retrievals/question > 1.5 (2Wiki, MuSiQue)", f"{linear['retrievals']:.2f}",
                     _verdict(linear["retrievals"] > 1.5) if applies else "not a target on HotpotQA"))  # fmt: skip
    else:
        rows.append(("linear retrievals/question > 1.5 (2Wiki, MuSiQue)", "no linear results", "not measured"))
    failed = {n: results[n].get("parse_failed") for n in ("tree", "auto") if n in results}
    measured = ", ".join(f"{n} {v}" for n, v in failed.items() if v is not None)
    rows.append(
        (
            "no parse failures (tree, auto)",
            measured or "no planned runs",
            _verdict(not any(failed.values())) if measured else "not measured",
        )
    )
    leaks = {n: r.get("demo_leaks") for n, r in results.items() if r.get("demo_leaks") is not None}
    leaks |= {
        f"{n} (first {other['n']})": r["demo_leaks"] for n, r in theirs.items() if r.get("demo_leaks") is not None
    }
    rows.append(("no demonstration answer without a passage that holds it", ", ".join(f"{n} {v}" for n, v in leaks.items() if v) or ("none" if leaks else "not counted"),
                 _verdict(not any(leaks.values())) if leaks else "not measured"))  # fmt: skip
    return rows


def _ratio(value: float, limit: float) -> str:
    """``value`` as a multiple, with more decimals where two would read as ``limit`` itself.

    >>> _ratio(0.5024, 0.5), _ratio(0.48, 0.5), _ratio(2.153, 1.0), _ratio(0.5, 0.5)
    ('0.502x', '0.48x', '2.15x', '0.50x')
    """
    digits = 2
    while digits < 6 and value != limit and f"{value:.{digits}f}" == f"{limit:.{digits}f}":
        digits += 1
    return f"{value:.{digits}f}x"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def best_of(results: dict[str, Any], names: Iterable[str]) -> str | None:
    """Of ``names``, the strategy with the highest EM in ``results`` (the first on a tie); None if
    none was measured.

    >>> best_of({"a": {"em": 0.2}, "b": {"em": 0.4}, "c": {"em": None}}, ("a", "b", "c", "d"))
    'b'
    """
    wanted = set(names)
    found = [n for n, r in results.items() if n in wanted and r["em"] is not None]
    return max(found, key=lambda n: results[n]["em"]) if found else None


def _interval(summary: dict[str, Any], a: str, b: str) -> tuple[float, float, float] | None:
    """``a``'s EM minus ``b``'s and its paired interval, from the summary's differences."""
    for d in summary.get("em_differences", ()):
        if {d["a"], d["b"]} == {a, b}:
            sign = 1 if d["a"] == a else -1
            low, high = sorted((sign * d["low"], sign * d["high"]))
            return sign * d["diff"], low, high
    return None


def standing(summary: dict[str, Any], companion: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """How ``name`` compares with the best baseline of a run (on the run's questions) and of its
    sibling (on the sibling's first questions): ``{"em", "text", "matches", "beats", "clear"}``, where
    ``clear`` means every paired interval lies above zero.

    >>> s = {"results": {"auto": {"em": 0.5}, "standard-rag": {"em": 0.4}},
    ...      "em_differences": [{"a": "auto", "b": "standard-rag", "diff": 0.1, "low": -0.1, "high": 0.3}]}
    >>> r = standing(s, None, "auto")
    >>> r["text"], r["matches"], r["beats"], r["clear"]
    ('50.0: +10.0 [-10.0, +30.0] over standard-rag', True, True, False)
    """
    results = summary["results"]
    if results[name]["em"] is None:
        return {"em": None, "text": "no results", "compared": False, "matches": False, "beats": False, "clear": False}
    comparisons: list[tuple[float, float | None, float | None, str]] = []  # (EM difference, low, high, label)
    if best := best_of(results, BASELINE_NAMES):
        d = _interval(summary, name, best)
        comparisons.append((results[name]["em"] - results[best]["em"], *(d[1:] if d else (None, None)), best))
    theirs = [n for n in (companion or {"results": {}})["results"] if n not in ENGINE_NAMES]
    if companion and name in companion["results"] and (best := best_of(companion["results"], theirs)):
        d = companion["differences"][(name, best)]
        comparisons.append((d.mean, d.low, d.high, f"{best} (first {companion['n']})"))
    text = "; ".join(f"{_points(mean, low, high)} over {label}" for mean, low, high, label in comparisons)
    return {
        "em": results[name]["em"],
        "text": f"{100 * results[name]['em']:.1f}: {text}"
        if comparisons
        else f"{100 * results[name]['em']:.1f}: no baseline",
        "compared": bool(comparisons),
        "matches": bool(comparisons) and all(c[0] >= -1e-9 for c in comparisons),
        "beats": bool(comparisons) and all(c[0] > 1e-9 for c in comparisons),
        "clear": bool(comparisons) and all(c[1] is not None and c[1] > 0 for c in comparisons),
    }


def across_sets(runs: Sequence[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[str]:
    """The EM target over every data set (Markdown lines): auto, and each set's best engine strategy,
    at least match the best baseline on every set and beat it on at least two. ``runs`` pairs each
    run's summary with its sibling's results (:func:`companion_results`); runs without auto are left out."""
    runs = [(s, c) for s, c in runs if "auto" in s["results"] and s["results"]["auto"]["em"] is not None]
    if not runs:
        return []
    lines = [
        "| set | auto | best engine strategy |",
        "|---|---|---|",
    ]
    verdicts: dict[str, list[dict[str, Any]]] = {"auto": [], "best": []}
    for summary, companion in runs:
        top = best_of(summary["results"], ENGINE_NAMES) or "auto"
        mine, best = standing(summary, companion, "auto"), standing(summary, companion, top)
        verdicts["auto"].append(mine)
        verdicts["best"].append(best)
        lines.append(f"| {summary['dataset']} (n={summary['n']}) | {mine['text']} | {top} {best['text']} |")
    lines += ["", "| target | measured | verdict |", "|---|---|---|"]
    for key, label in (("auto", "auto"), ("best", "the best engine strategy of each set")):
        rows = verdicts[key]
        matched, beaten, clear = (sum(r[k] for r in rows) for k in ("matches", "beats", "clear"))
        lines.append(
            f"| {label} at least matches the best baseline on every set and beats it on at least two "
            f"| matches on {matched} of {len(rows)}, beats on {beaten} (interval above zero on {clear}) "
            f"| {_verdict(matched == len(rows) and beaten >= min(2, len(rows)))} |"
        )
    return [*lines, "", *other_targets(runs)]


EM_TARGETS = ("auto EM", "best engine strategy")
"""Beginnings of the per-run targets that :func:`across_sets` gathers in its own table."""


def other_targets(runs: Sequence[tuple[dict[str, Any], dict[str, Any] | None]]) -> list[str]:
    """The per-run targets other than EM, one column per set (Markdown lines).

    >>> s = {"dataset": "d", "n": 2, "results": {"auto": {"em": 0.5, "seconds": 4.0}, "iter-retgen": {"em": 0.5, "seconds": 2.0}}}
    >>> print("\\n".join(other_targets([(s, None)])[:3]))
    | target | d (n=2) |
    |---|---|
    | auto on the EM-vs-seconds Pareto front (no baseline as accurate and faster) | **not met**: dominated by iter-retgen |
    """
    columns = [{t: (m, v) for t, m, v in targets(s, c)} for s, c in runs]
    names = [t for t in dict.fromkeys(t for column in columns for t in column) if not t.startswith(EM_TARGETS)]
    lines = [
        "| target | " + " | ".join(f"{s['dataset']} (n={s['n']})" for s, _ in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for name in names:
        cells = [f"{column[name][1]}: {column[name][0]}" if name in column else "-" for column in columns]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return lines

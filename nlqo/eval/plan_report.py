"""The plan benchmark's figures: pooled over questions with 95% intervals, and its Markdown tables.

Shares are pooled over what they count (atoms, gold steps, gold edges, step pairs, leaves or
questions) with Wilson intervals; the mean plan score gets a seeded bootstrap interval. Each is
given per set and variant, and per hop count and question type.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from nlqo.eval.metrics import wilson_interval
from nlqo.eval.summary import table
from nlqo.testing.plan_score import OUTCOMES

Record = Mapping[str, Any]
RESAMPLES = 2000
"""Bootstrap resamples of a mean."""
BLOCK = "plan-bench"
"""The block of docs/benchmarks.md the table goes in."""
PLANRAG_SOURCE = (
    "PlanRAG's fine-grained analysis (human annotation of their own plans on their data, not measured here)"
)


@attrs.frozen
class Figure:
    """One column: a share pooled over the records (``count``) or a mean (``values``)."""

    key: str
    label: str
    count: Callable[[Sequence[Record]], tuple[float, float]] | None = None
    values: Callable[[Sequence[Record]], list[float]] | None = None
    planrag: float | None = None
    """The PlanRAG paper's figure, in percent, where it reports one."""


def _textual(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r["textual"]]


def _pooled(num: str, den: str) -> Callable[[Sequence[Record]], tuple[float, float]]:
    def count(records: Sequence[Record]) -> tuple[float, float]:
        rows = _textual(records)
        return sum(r[num] for r in rows), sum(r[den] for r in rows)

    return count


def _relation(kind: str) -> Callable[[Sequence[Record]], tuple[float, float]]:
    def count(records: Sequence[Record]) -> tuple[float, float]:
        rows = _textual(records)
        return sum(r["relations"][kind]["right"] for r in rows), sum(r["relations"][kind]["pairs"] for r in rows)

    return count


def _questions(field: str) -> Callable[[Sequence[Record]], tuple[float, float]]:
    def count(records: Sequence[Record]) -> tuple[float, float]:
        defined = [r for r in records if r[field] is not None]
        return sum(bool(r[field]) for r in defined), len(defined)

    return count


FIGURES = (
    Figure("planned", "planned", count=_questions("planned")),
    Figure("precision", "atom precision (AQG acc.)", count=_pooled("matched", "atoms"), planrag=98.5),
    Figure("recall", "atom coverage", count=_pooled("matched", "steps"), planrag=94.2),
    Figure("edges", "gold edges found", count=_pooled("edges_found", "gold_edges")),
    Figure("relation_none", "rel. none", count=_relation("none"), planrag=96.4),
    Figure("relation_parent-child", "rel. parent-child", count=_relation("parent-child"), planrag=83.1),
    Figure("relation_sibling", "rel. sibling", count=_relation("sibling"), planrag=87.9),
    Figure("linear_degeneration", "linear degeneration", count=_questions("linear_degeneration"), planrag=3.2),
    Figure(
        "bare_leaves",
        "leaves naming no entity",
        count=lambda rs: (sum(r["bare_leaves"] for r in rs), sum(r["leaves"] for r in rs)),
    ),
    Figure("depth_match", "depth = gold", count=_questions("depth_match")),
    Figure("shape_match", "shape = gold", count=_questions("shape_match")),
    Figure("overall", "plan score (mean)", values=lambda rs: [float(r["overall"]) for r in rs]),
)
"""The columns, in order. AQG acc.: PlanRAG's atomic query generation accuracy."""


def bootstrap_mean(values: Sequence[float], *, seed: int, resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """The mean and its percentile bootstrap 95% interval, seeded.

    >>> bootstrap_mean([1.0, 1.0, 1.0], seed=0)
    (1.0, 1.0, 1.0)
    """
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(x.mean()), float(low), float(high)


def figure(fig: Figure, records: Sequence[Record], *, seed: int) -> dict[str, Any] | None:
    """``{"value", "low", "high"}`` (with ``k`` and ``n`` for a share), or None with nothing to count."""
    if fig.values is not None:
        values = fig.values(records)
        if not values:
            return None
        mean, low, high = bootstrap_mean(values, seed=seed)
        return {"value": mean, "low": low, "high": high, "n": len(values)}
    assert fig.count is not None
    k, n = fig.count(records)
    if not n:
        return None
    low, high = wilson_interval(k, int(n))
    return {"value": k / n, "low": low, "high": high, "k": k, "n": n}


def groups(records: Sequence[Record]) -> Iterable[tuple[str, list[Record]]]:
    """``all``, then by hop count, then by question type."""
    yield "all", list(records)
    for hops in sorted({r["hops"] for r in records}):
        yield f"{hops} hops", [r for r in records if r["hops"] == hops]
    for kind in sorted({r["kind"] for r in records if r["kind"]}):
        yield f"type {kind}", [r for r in records if r["kind"] == kind]


def summarize(records: Sequence[Record], *, seed: int = 0) -> list[dict[str, Any]]:
    """One row per (set, variant, group), in record order of sets and variants."""
    rows = []
    keys = list(dict.fromkeys((r["dataset"], r["variant"]) for r in records))
    for dataset, variant in keys:
        mine = [r for r in records if r["dataset"] == dataset and r["variant"] == variant]
        first = mine[0]
        for group, members in groups(mine):
            rows.append(
                {
                    "dataset": dataset,
                    "variant": variant,
                    "cost_model": first["cost_model"],
                    "rules": first["rules"],
                    "search": first["search"],
                    "group": group,
                    "questions": len(members),
                    "figures": {f.key: figure(f, members, seed=seed) for f in FIGURES},
                    "edge_outcomes": edge_outcomes(members),
                }
            )
    return rows


def edge_outcomes(records: Sequence[Record]) -> dict[str, int]:
    """What the plans made of the gold edges, summed (:data:`nlqo.testing.plan_score.OUTCOMES`)."""
    total: dict[str, int] = {k: 0 for k in OUTCOMES}
    for r in _textual(records):
        for k, n in r["edge_outcomes"].items():
            total[k] = total.get(k, 0) + n
    return total


def cell(value: Mapping[str, Any] | None, *, mean: bool = False) -> str:
    """``62.1 [58, 66]`` (percent) or ``0.62 [0.58, 0.66]`` (a mean); ``–`` for nothing to count.

    >>> cell({"value": 0.621, "low": 0.58, "high": 0.66}), cell(None)
    ('62.1 [58, 66]', '–')
    """
    if value is None:
        return "–"
    if mean:
        return f"{value['value']:.2f} [{value['low']:.2f}, {value['high']:.2f}]"
    return f"{100 * value['value']:.1f} [{100 * value['low']:.0f}, {100 * value['high']:.0f}]"


def _cells(row: Mapping[str, Any], figures: Sequence[Figure]) -> list[str]:
    return [cell(row["figures"][f.key], mean=f.values is not None) for f in figures]


def main_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Every set and variant over all its questions, with PlanRAG's reported figures below."""
    head = ["set", "cost model", "rules", "search", "questions", *(f.label for f in FIGURES)]
    body = [[*_lead(row), str(row["questions"]), *_cells(row, FIGURES)] for row in rows if row["group"] == "all"]
    planrag = ["–" if f.planrag is None else f"{f.planrag:.1f}" for f in FIGURES]
    return table(head, [*body, ["PlanRAG paper", "–", "–", "–", "–", *planrag]])


def _lead(row: Mapping[str, Any]) -> list[str]:
    return [row["dataset"], row["cost_model"], row["rules"], row["search"]]


def edges_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Every set and variant: the share of the gold edges the plans hang parent over child, the wrong
    way round, as siblings, as unrelated, or with a step no atom matched."""
    head = ["set", "cost model", "rules", "search", "gold edges", *(f"as {k}" for k in OUTCOMES)]
    body = []
    for row in rows:
        counts = row["edge_outcomes"]
        total = sum(counts.values())
        if row["group"] == "all" and total:
            body.append([*_lead(row), str(total), *(f"{100 * counts[k] / total:.1f}" for k in OUTCOMES)])
    return table(head, body)


def breakdown_table(rows: Sequence[Mapping[str, Any]], variant: str) -> str:
    """One variant by hop count and question type, set by set."""
    shown = [f for f in FIGURES if f.key not in ("planned", "bare_leaves")]
    head = ["set", "questions", "group", *(f.label for f in shown)]
    body = [
        [row["dataset"], str(row["questions"]), row["group"], *_cells(row, shown)]
        for row in rows
        if row["variant"] == variant and row["group"] != "all"
    ]
    return table(head, body)


def report(rows: Sequence[Mapping[str, Any]], run: Mapping[str, Any]) -> str:
    """The Markdown the docs block holds: the main table, PlanRAG's figures, one variant's breakdown, how it was made."""
    about = (
        f"PlanRAG paper: {PLANRAG_SOURCE}; AQG acc. is their atomic query generation accuracy. "
        "Here every figure is computed automatically against the sets' gold decompositions, so the two are "
        "not measured alike."
    )
    if not rows:
        return "\n\n".join([main_table(rows), about, "Not measured yet: " + run.get("hint", "run nlqo bench-plans.")])
    reference = rows[0]["variant"]
    parts = [
        main_table(rows),
        about,
        "What the plans made of the gold edges (% of the gold edges):",
        edges_table(rows),
        f"By hop count and question type, `{reference}`:",
        breakdown_table(rows, reference),
        footnote(run),
    ]
    return "\n\n".join(parts)


def footnote(run: Mapping[str, Any]) -> str:
    """How the tables were made: parses, matching, intervals, timing, command."""
    parts = [
        f"Parses: {run.get('model')} ({run.get('parse_settings', '')}), cached per question. "
        f"Atoms matched to gold steps by {run.get('embedder')} cosine + {run.get('entity_weight')} x entity overlap "
        f">= {run.get('threshold')} (greedy bipartite; nlqo.testing.plan_score). 2Wiki golds are shapes from the "
        "question type: matching figures do not apply. Shares pooled with Wilson 95% intervals; the plan score's "
        f"interval by bootstrap ({RESAMPLES} resamples, seed {run.get('seed')}).",
        f"Scoring {run.get('plans')} plans took {run.get('score_seconds', 0):.1f} s "
        f"(embedding {run.get('embed_seconds', 0):.1f} s of it) on {run.get('cpus')} cores; "
        f"`{run.get('command')}` ({run.get('finished')}).",
    ]
    return " ".join(parts)

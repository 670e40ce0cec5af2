"""EXPLAIN: render a plan as indented text (PostgreSQL look), stable JSON, or graphviz DOT.

Renderers take optional per-node annotations so that later stages (physical operators,
EXPLAIN ANALYZE timings) add to the same output instead of re-implementing it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import attrs

from nlqo.optimizer.cost import CostContext, CostModel
from nlqo.ir import Const, Var
from nlqo.optimizer.plan import ROOT, Cost, Plan
from nlqo.ir.syntax import answer_text

JSON_VERSION = 2
"""2: ``stats.left_out`` lists objects with a reason; ``stats`` has budget, beam, beam_dropped and exact."""

NON_FINITE = {math.inf: "inf", -math.inf: "-inf"}
"""How JSON writes a cost that is not a finite number (JSON has none); NaN is ``"nan"`` (docs/explain.md)."""


def json_number(x: float) -> float | str:
    """``x`` for JSON: itself when finite, else ``"inf"``, ``"-inf"`` or ``"nan"``.

    >>> json_number(2.5), json_number(math.inf), json_number(-math.inf), json_number(math.nan)
    (2.5, 'inf', '-inf', 'nan')
    """
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else NON_FINITE[x]


def _json_cost(cost: Cost) -> dict[str, Any]:
    return {"total": json_number(cost.total), "terms": {k: json_number(v) for k, v in cost.terms.items()}}


def node_costs(plan: Plan, model: CostModel, ctx: CostContext) -> dict[str, Cost]:
    """The cost model evaluated on every node's subtree (the root's is the plan's total)."""
    out = {}
    for node in plan.tree.nodes:
        out[node] = plan.cost if node == ROOT else model.evaluate(plan.tree.subtree(node), ctx)
    return out


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return str(json_number(x))
    if abs(x) >= 1e15:  # every digit of a huge float is noise
        return f"{x:g}"
    return f"{x:.3f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def _terms(cost: Cost) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in cost.terms.items())


def _term_text(t: Var | Const) -> str:
    return str(t) if isinstance(t, Var) else t.text


def text(
    plan: Plan,
    *,
    model: CostModel | None = None,
    costs: Mapping[str, Cost] | None = None,
    annotations: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> str:
    """One node per line, children indented under their parent, then totals."""
    lines = [f"QUERY PLAN (cost model: {model.name if model else '?'}; lower cost is better)"]
    for node, depth in plan.tree.preorder():
        label = plan.label(node) if node == ROOT else f"{node}: {plan.label(node)}"
        parts = []
        if costs and node in costs:
            parts.append(f"cost={_fmt(costs[node].total)} {_terms(costs[node])}")
        if annotations and annotations.get(node):
            parts.append(annotations[node])
        suffix = "  (" + "; ".join(parts) + ")" if parts else ""
        prefix = "" if depth == 0 else "  " * (3 * depth - 2) + "-> "
        lines.append(prefix + label + suffix)
    s = plan.stats
    formula = model.formula() if model else ""
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in (model.params.items() if model else ()))
    lines.append(f"Cost: {_fmt(plan.cost.total)}  [{_terms(plan.cost)}]")
    if model:
        lines.append(f"Cost model: {formula}" + (f"  with {params}" if params else ""))
    lines.append(
        f"Planning: {s.method}{' (fallback)' if s.fallback else ''}, {s.llm_calls} LLM calls, "
        f"{s.cache_hits} cache hits, {s.pruned_pairs} pruned pairs, {s.planning_ms:.1f} ms"
    )
    lines.append(
        f"Search: {'exact' if s.exact else 'not exact: ' + '; '.join(s.inexact_because)}; "
        f"{s.pairs} of {s.budget} sub-plan pairs, beam {s.beam} ({s.beam_dropped} cut)"
    )
    for gone in plan.left_out:
        lines.append(f"Left out: {gone.id} ({gone.text}): {gone.reason}")
    for w in plan.warnings:
        lines.append(f"Warning: {w}")
    if verbose:
        lines.append(
            f"Search space: {s.subsets} atom sets, {s.candidates} complete candidates"
            f", {s.merge_checks} merge checks ({s.merge_rejections} rejected)"
        )
        lines.append("Relations:")
        for (a, b), kind in sorted(plan.relations.items()):
            lines.append(f"  {a} {kind} {b}  [{plan.relation_source.get((a, b), '?')}]")
    return "\n".join(lines)


def to_dict(
    plan: Plan,
    *,
    model: CostModel | None = None,
    costs: Mapping[str, Cost] | None = None,
    extra_nodes: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The stable JSON shape documented in docs/explain.md."""
    q = plan.query
    nodes = []
    for node, _ in plan.tree.preorder():
        atom = plan.atom(node)
        entry: dict[str, Any] = {
            "id": node,
            "triple": None if atom is None else [_term_text(t) for t in atom.terms],
            "children": list(plan.tree.children[node]),
        }
        if costs and node in costs:
            entry["cost"] = _json_cost(costs[node])
        if extra_nodes and node in extra_nodes:
            entry.update(extra_nodes[node])
        nodes.append(entry)
    s = plan.stats
    return {
        "version": JSON_VERSION,
        "question": q.question,
        "answer_var": answer_text(q),
        "root": ROOT,
        "nodes": nodes,
        "cost": {**_json_cost(plan.cost), "model": model.name if model else None},
        "stats": {
            "planning_ms": s.planning_ms,
            "llm_calls": s.llm_calls,
            "llm_usage": attrs.asdict(s.llm_usage),
            "cache_hits": s.cache_hits,
            "subsets": s.subsets,
            "pairs": s.pairs,
            "pruned_pairs": s.pruned_pairs,
            "fallback": s.fallback,
            "method": s.method,
            "budget": s.budget,
            "beam": s.beam,
            "beam_dropped": s.beam_dropped,
            "exact": s.exact,
            "inexact_because": list(s.inexact_because),
            "left_out": [{"id": x.id, "atom": x.text, "reason": x.reason} for x in plan.left_out],
        },
        "warnings": list(plan.warnings),
        "relations": [
            {"a": a, "b": b, "kind": k, "source": plan.relation_source.get((a, b))}
            for (a, b), k in sorted(plan.relations.items())
        ],
    }


def to_json(plan: Plan, **kwargs: Any) -> str:
    return json.dumps(to_dict(plan, **kwargs), indent=2, ensure_ascii=False, allow_nan=False)


def _dot_escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def dot(plan: Plan, *, costs: Mapping[str, Cost] | None = None, annotations: Mapping[str, str] | None = None) -> str:
    """Graphviz: one box per node, arrows in data-flow direction (child answer -> parent)."""
    out = ["digraph plan {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica", fontsize=11];']
    for node in plan.tree.nodes:
        lines = [plan.label(node) if node == ROOT else f"{node}: {plan.label(node)}"]
        if costs and node in costs:
            lines.append(f"cost={_fmt(costs[node].total)}")
        if annotations and annotations.get(node):
            lines.append(annotations[node])
        shape = ", shape=doubleoctagon" if node == ROOT else ""
        out.append(f'  "{_dot_escape(node)}" [label="{_dot_escape(chr(10).join(lines))}"{shape}];')
    for child, parent in plan.tree.parent:
        out.append(f'  "{_dot_escape(child)}" -> "{_dot_escape(parent)}";')
    for gone in plan.left_out:
        out.append(
            f'  "{_dot_escape(gone.id)}" [label="{_dot_escape(gone.id + ": " + gone.text)}\\n(left out)", style=dashed];'
        )
    out.append("}")
    return "\n".join(out)

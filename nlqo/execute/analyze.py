"""EXPLAIN (ANALYZE) of a physical plan: per-node annotations and totals from a run's trace."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from nlqo import explain
from nlqo.execute.lower import PhysicalPlan
from nlqo.execute.choice import CHOICE_NODE
from nlqo.execute.fallback import FALLBACK_NODE
from nlqo.execute.trace import RunResult, Step
from nlqo.plan import ROOT


def _by_node(result: RunResult, physical: PhysicalPlan) -> dict[str, list[int]]:
    """Positions in the trace of each plan node's steps. Linear hops map to atoms in execution
    order (the hints); steps of no plan node (parsing, say) keep their own label."""
    groups: dict[str, list[int]] = defaultdict(list)
    order = [n for n in physical.logical.tree.postorder() if n != ROOT]
    for i, step in enumerate(result.trace):
        node = step.node
        if physical.operator == "retrieve":
            node = ROOT
        elif physical.operator == "linear" and node.startswith("hop-"):
            hop = _hop_number(node) - 1
            node = order[hop] if 0 <= hop < len(order) else ROOT
        elif node in ("answer", FALLBACK_NODE, CHOICE_NODE):
            node = ROOT
        groups[node].append(i)
    return groups


def _hop_number(node: str) -> int:
    """The hop a linear step's label names, or 0 for a label that names none.

    >>> _hop_number("hop-3"), _hop_number("hop-x")
    (3, 0)
    """
    number = node.partition("-")[2]
    return int(number) if number.isdigit() else 0


def node_actuals(steps: list[Step]) -> dict[str, Any]:
    llm = [s for s in steps if s.kind == "llm"]
    passages = [p for s in steps if s.kind == "retrieve" for p in s.passages]
    scores = [s.terminator_score for s in steps if s.terminator_score is not None]
    start = min((s.started_ms for s in steps), default=0.0)
    end = max((s.started_ms + s.wall_ms for s in steps), default=0.0)
    return {
        "actual_ms": end - start,
        "llm_calls": sum(s.calls for s in llm),
        "prompt_tokens": sum(s.prompt_tokens for s in llm),
        "cached_prompt_tokens": sum(s.cached_prompt_tokens for s in llm),
        "generated_tokens": sum(s.generated_tokens for s in llm),
        "forced_tokens": sum(s.forced_tokens for s in llm),
        "computed_prompt_tokens": sum(s.prompt_tokens - s.cached_prompt_tokens for s in llm),
        "passages": [{"id": p.id, "title": p.title, "score": p.score} for p in passages],
        "terminator_score": max(scores) if scores else None,
    }


def physical_annotations(physical: PhysicalPlan) -> dict[str, str]:
    """What runs each node: the operator and its wave (tree) or hop (linear)."""
    out = {}
    if physical.operator == "tree":
        for wave, nodes in enumerate(physical.waves, 1):
            for n in nodes:
                out[n] = f"ParallelTree wave {wave}"
    elif physical.operator == "retrieve":
        for n in physical.logical.tree.nodes:
            out[n] = "Retrieve: one retrieval, one answer" if n == ROOT else "answered by the root's retrieval"
    else:
        order = [n for n in physical.logical.tree.postorder() if n != ROOT]
        for i, n in enumerate(order, 1):
            out[n] = f"LinearTemplate hop {i} hint"
        out[ROOT] = "LinearTemplate final answer"
    return out


def actual_annotations(result: RunResult, physical: PhysicalPlan) -> dict[str, str]:
    base = physical_annotations(physical)
    out = {}
    for node, positions in _by_node(result, physical).items():
        a = node_actuals([result.trace[i] for i in positions])
        score = f" stop-score={a['terminator_score']:.2f}" if a["terminator_score"] is not None else ""
        out[node] = (
            f"{base.get(node, '')}; actual time={a['actual_ms']:.0f} ms llm={a['llm_calls']} "
            f"tokens={a['computed_prompt_tokens']}/{a['cached_prompt_tokens']}/{a['generated_tokens']}{_forced(a['forced_tokens'])} "
            f"passages={len(a['passages'])}{score}"
        ).lstrip("; ")
    for node, text in base.items():
        out.setdefault(node, text + "; never executed")
    return out


def _forced(n: int) -> str:
    """The forced-token count after the generated one, when there are any.

    >>> _forced(0), _forced(12)
    ('', '+12 forced')
    """
    return f"+{n} forced" if n else ""


def parsing_lines(result: RunResult) -> list[str]:
    """One line per parse step: constrained or not, attempts and repairs, tokens."""
    lines = []
    for s in result.trace:
        if s.node == "parse" and s.kind == "llm":
            lines.append(
                f"Parsing: {s.note or 'the question'}; {s.wall_ms:.0f} ms, tokens "
                f"{s.prompt_tokens - s.cached_prompt_tokens}/{s.cached_prompt_tokens}/{s.generated_tokens}{_forced(s.forced_tokens)}"
            )
    return lines


OPERATOR_NAMES = {"linear": "LinearTemplate (TSSS)", "tree": "ParallelTree (PlanRAG)", "retrieve": "Retrieve (standard RAG)"}


def physical_lines(physical: PhysicalPlan) -> list[str]:
    est = physical.estimates
    lines = [f"Physical plan: {OPERATOR_NAMES[physical.operator]}"]
    lines.append(f"  chosen: {physical.reason}")
    for name, e in est.items():
        lines.append(
            f"  estimate {name}: {e.ms / 1000:.1f} s, {e.llm_calls} LLM calls, {e.generated_tokens} generated, "
            f"{e.computed_prompt_tokens} prompt tokens computed"
        )
    return lines


def text(result: RunResult | None, physical: PhysicalPlan, *, model=None, costs=None) -> str:
    """The plan tree with physical operators (and actuals when ``result`` is given), then totals."""
    notes = actual_annotations(result, physical) if result is not None else physical_annotations(physical)
    body = explain.text(physical.logical, model=model, costs=costs, annotations=notes)
    lines = [body, *physical_lines(physical)]
    if result is not None:
        s = result.stats()
        lines += parsing_lines(result)
        forced = f", {s['forced_tokens']} forced" if s["forced_tokens"] else ""
        lines.append(
            f"Execution: {s['execution_ms']:.0f} ms, {s['llm_calls']} LLM calls, {s['prompt_tokens']} prompt tokens "
            f"({s['cached_prompt_tokens']} from cache), {s['generated_tokens']} generated{forced}, {s['hops']} hops, "
            f"stop: {s['stop_reason']}"
        )
        lines.append(f"Planning time: {s['planning_ms']:.0f} ms")
        lines.append(f"Answer: {result.answer}" if result.answer.strip() else "Answer: (none: no usable answer in the retrieved passages)")
    lines.append("(tokens = prompt computed / prompt from cache / generated [+ forced by a grammar, appended without sampling])")
    return "\n".join(lines)


def to_dict(result: RunResult | None, physical: PhysicalPlan, *, model=None, costs=None, trace: bool = True) -> dict[str, Any]:
    """The plan as JSON with its physical operator and, given ``result``, each node's actuals
    (``steps`` are positions in the trace) and an ``analyze`` section with the whole trace,
    prompts and passage texts included; ``trace=False`` leaves that section out (bench records
    hold the trace themselves)."""
    extra: Mapping[str, Mapping[str, Any]] = {}
    if result is not None:
        extra = {
            n: {"actual": {**node_actuals([result.trace[i] for i in positions]), "steps": positions}}
            for n, positions in _by_node(result, physical).items()
        }
    phys = physical_annotations(physical)
    extra = {n: {**extra.get(n, {}), "operator": phys.get(n, "")} for n in physical.logical.tree.nodes}
    data = explain.to_dict(physical.logical, model=model, costs=costs, extra_nodes=extra)
    data["physical"] = {
        "operator": physical.operator,
        "reason": physical.reason,
        "estimates": {k: {"ms": e.ms, "llm_calls": e.llm_calls, "generated_tokens": e.generated_tokens, "computed_prompt_tokens": e.computed_prompt_tokens} for k, e in physical.estimates.items()},
        "waves": [list(w) for w in physical.waves],
        "hints": list(physical.hints),
    }
    if result is not None and trace:
        data["analyze"] = result.to_dict(texts=True)
    return data

"""EXPLAIN (ANALYZE) of a physical plan: per-node annotations and totals from a run's trace."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping

from nlqo.explain import render
from nlqo.execution.physical import PhysicalPlan
from nlqo.execution.choice import CHOICE_NODE
from nlqo.execution.fallback import FALLBACK_NODE
from nlqo.execution.trace import NOT_ANSWERS, RunResult, Step, confidence_dict
from nlqo.kinds import StepKind, escalated
from nlqo.optimizer.plan import ROOT
from nlqo.runtime.llm.base import TOKEN_COUNTS
from nlqo.runtime.llm.confidence import Confidence


def _by_node(result: RunResult, physical: PhysicalPlan) -> dict[str, list[int]]:
    """Positions in the trace of each plan node's steps. Linear hops map to atoms in execution
    order (the hints); steps of no plan node (parsing, say) keep their own label."""
    groups: dict[str, list[int]] = defaultdict(list)
    order = [n for n in physical.logical.tree.postorder() if n != ROOT]
    for i, step in enumerate(result.trace):
        node = step.node
        if physical.operator not in ("linear", "tree") or not physical.parsed:
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
        **{name: sum(getattr(s, name) for s in llm) for name in TOKEN_COUNTS},
        "computed_prompt_tokens": sum(s.prompt_tokens - s.cached_prompt_tokens for s in llm),
        "passages": [{"id": p.id, "title": p.title, "score": p.score} for p in passages],
        "terminator_score": max(scores) if scores else None,
        "confidence": confidence_dict(node_confidence(steps)),
    }


def node_confidence(steps: list[Step]) -> Confidence | None:
    """The confidence of a node's last generation that has one (its answer: a tree node's answer,
    a hop's fact, the final answer), the parse and relation steps left out."""
    for s in reversed(steps):
        if s.kind == "llm" and s.confidence is not None and s.node not in NOT_ANSWERS:
            return s.confidence
    return None


def confidence_text(c: Confidence | None) -> str:
    """A confidence in an EXPLAIN line: mean/min log-probability, mean/max entropy, first margin.

    >>> confidence_text(Confidence(4, -0.213, -1.5, 0.42, 2.0, 3.1))
    ' logprob=-0.21/-1.50 entropy=0.42/2.00 margin=3.10'
    >>> confidence_text(None)
    ''
    """
    if c is None:
        return ""
    return (
        f" logprob={c.mean_logprob:.2f}/{c.min_logprob:.2f} entropy={c.mean_entropy:.2f}/{c.max_entropy:.2f} "
        f"margin={c.first_margin:.2f}"
    )


def physical_annotations(physical: PhysicalPlan) -> dict[str, str]:
    """What runs each node: the operator and its wave (tree) or hop (linear)."""
    from nlqo.execution.operators import OPERATORS

    return dict(OPERATORS[physical.operator].annotate(physical))


def actual_annotations(result: RunResult, physical: PhysicalPlan) -> dict[str, str]:
    base = physical_annotations(physical)
    out = {}
    for node, positions in _by_node(result, physical).items():
        steps = [result.trace[i] for i in positions]
        a = node_actuals(steps)
        score = f" stop-score={a['terminator_score']:.2f}" if a["terminator_score"] is not None else ""
        out[node] = (
            f"{base.get(node, '')}; actual time={a['actual_ms']:.0f} ms llm={a['llm_calls']} "
            f"tokens={a['computed_prompt_tokens']}/{a['cached_prompt_tokens']}/{a['generated_tokens']}{_forced(a['forced_tokens'])} "
            f"passages={len(a['passages'])}{score}{confidence_text(node_confidence(steps))}"
        ).lstrip("; ")
    for node, text in base.items():
        out.setdefault(node, f"{text}; never executed" if text else "never executed")
    return out


def _forced(n: int) -> str:
    """The forced-token count after the generated one, when there are any.

    >>> _forced(0), _forced(12)
    ('', '+12 forced')
    """
    return f"+{n} forced" if n else ""


def parsing_lines(result: RunResult) -> list[str]:
    """One line per parse step: constrained or not, attempts and repairs, tokens."""
    return [
        f"Parsing: {s.note or 'the question'}; {s.wall_ms:.0f} ms, tokens "
        f"{s.prompt_tokens - s.cached_prompt_tokens}/{s.cached_prompt_tokens}/{s.generated_tokens}{_forced(s.forced_tokens)}"
        for s in result.trace
        if s.node == "parse" and s.kind == "llm"
    ]


def physical_lines(physical: PhysicalPlan, result: RunResult | None = None) -> list[str]:
    """The operator, why it was chosen (every candidate with its estimates, when ``auto`` chose by
    statistics), each structural estimate, and with ``result`` estimated against actual seconds."""
    from nlqo.execution.operators import OPERATORS

    lines = [f"Physical plan: {OPERATORS[physical.operator].label}"]
    if physical.choice is not None:
        lines += choice_lines(physical.choice)
    else:
        lines.append(f"  chosen: {physical.reason}")
    if not physical.parsed:
        lines.append("  (the question was not parsed: the plan above is the question as one atom)")
    for name, e in physical.estimates.items():
        lines.append(
            f"  structural estimate {name}: {e.ms / 1000:.1f} s, {e.llm_calls} LLM calls, {e.generated_tokens} generated, "
            f"{e.computed_prompt_tokens} prompt tokens computed"
        )
    if result is not None and physical.choice is not None:
        chosen = physical.choice.chosen
        estimated, actual = chosen.seconds, (result.planning_ms + result.execution_ms) / 1000
        also = ""
        if chosen.escalated_seconds is not None and escalated(result.stop_reason):
            also = f" (the mix's mean; a question it escalates: {chosen.escalated_seconds:.1f})"
        lines.append(
            f"  seconds: estimated {estimated:.1f}{also}, actual {actual:.1f}, q-error {q_error(estimated, actual):.2f}"
        )
    return lines


def choice_lines(choice) -> list[str]:
    """Every candidate of a choice by statistics: estimated EM with its interval and sample count, seconds."""
    lines = [
        f"  choice: policy {choice.policy}, question class {choice.question_class}; statistics: {choice.statistics}"
    ]
    for c in sorted(choice.candidates, key=lambda c: c.seconds):
        mark = "->" if c.operator == choice.operator else "  "
        em = f"{c.em:6.1%} [{c.em_low:.1%}, {c.em_high:.1%}]" if c.n else "unknown"
        lines.append(f"  {mark} {c.operator:<9} est. EM {em} n={c.n} ({c.basis}), est. {c.seconds:.1f} s")
    lines.append(f"  chosen: {choice.operator}: {choice.reason}")
    if choice.skipped:
        lines.append(f"  skipped: {choice.skipped}")
    return lines


def q_error(estimated: float, actual: float) -> float:
    """max(est/actual, actual/est): 1 is a perfect estimate.

    >>> q_error(10, 8), q_error(8, 10), q_error(0, 1)
    (1.25, 1.25, inf)
    """
    if estimated <= 0 or actual <= 0:
        return float("inf") if estimated != actual else 1.0
    return max(estimated / actual, actual / estimated)


def text(result: RunResult | None, physical: PhysicalPlan, *, model=None, costs=None, escalation_costs=None) -> str:
    """The plan tree with physical operators (and actuals when ``result`` is given), then totals."""
    notes = actual_annotations(result, physical) if result is not None else physical_annotations(physical)
    body = render.text(physical.logical, model=model, costs=costs, annotations=notes)
    lines = [body, *physical_lines(physical, result)]
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
        lines.append(
            f"Answer: {result.answer}"
            if result.answer.strip()
            else "Answer: (none: no usable answer in the retrieved passages)"
        )
        lines += answer_confidence_lines(result.confidence)
        lines += [f"Cascade: {d['text']}" for d in decisions(result)]
        lines += escalation_lines(result, model=model, costs=escalation_costs)
        if any(s.confidence is not None for s in result.trace):
            lines.append(
                "(logprob = mean/min log-probability of the tokens the model chose, entropy = mean/max of their "
                "distributions in nats, margin = the first token's log-probability over the runner-up's)"
            )
    lines.append(
        "(tokens = prompt computed / prompt from cache / generated [+ forced by a grammar, appended without sampling])"
    )
    return "\n".join(lines)


def escalation_lines(result: RunResult, *, model=None, costs=None) -> list[str]:
    """The parsed plan a cascade's escalation ran, each node with its operator and actuals."""
    from nlqo.execution.operators import OPERATORS

    escalation = result.escalation
    if escalation is None:
        return []
    body = render.text(escalation.logical, model=model, costs=costs, annotations=actual_annotations(result, escalation))
    head = f"Escalation's plan ({OPERATORS[escalation.operator].label}, the question parsed and planned):"
    return [head, *("  " + line for line in body.splitlines())]


def decisions(result: RunResult) -> list[dict[str, Any]]:
    """The cascade's decisions, in order: each its text and the numbers it was taken by (the feature,
    its value, the threshold, the probabilities of being right, the answer kept and why)."""
    from nlqo.execution.operators.cascade import NODE

    return [{"text": s.text, **dict(s.decision)} for s in result.trace if s.node == NODE and s.kind == StepKind.STOP]


def answer_confidence_lines(c: Confidence | None) -> list[str]:
    """The final answer's confidence: of its generation, and of the answer's own tokens when known."""
    if c is None:
        return []
    lines = [f"Confidence: {c.describe()}"]
    if c.answer is not None:
        lines.append(f"  of the answer's tokens: {c.answer.describe()}")
    return lines


def to_dict(
    result: RunResult | None,
    physical: PhysicalPlan,
    *,
    model=None,
    costs=None,
    trace: bool = True,
    escalation_costs=None,
) -> dict[str, Any]:
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
    data = render.to_dict(physical.logical, model=model, costs=costs, extra_nodes=extra)
    data["physical"] = {
        "operator": physical.operator,
        "reason": physical.reason,
        "estimates": {
            k: {
                "ms": e.ms,
                "llm_calls": e.llm_calls,
                "generated_tokens": e.generated_tokens,
                "computed_prompt_tokens": e.computed_prompt_tokens,
            }
            for k, e in physical.estimates.items()
        },
        "waves": [list(w) for w in physical.waves],
        "hints": list(physical.hints),
        "parsed": physical.parsed,
        "choice": None if physical.choice is None else choice_dict(physical.choice, result),
    }
    if result is not None:
        data["physical"]["decisions"] = decisions(result)
        if result.escalation is not None and result.escalation is not physical:
            data["escalation"] = to_dict(result, result.escalation, model=model, costs=escalation_costs, trace=False)
    if result is not None and trace:
        data["analyze"] = result.to_dict(texts=True)
    return data


def choice_dict(choice, result: RunResult | None) -> dict[str, Any]:
    """A choice by statistics as JSON, with estimated against actual seconds when run."""
    import attrs

    data = attrs.asdict(choice)
    if result is not None:
        actual = (result.planning_ms + result.execution_ms) / 1000
        data["actual_seconds"] = actual
        q = q_error(choice.chosen.seconds, actual)
        data["q_error"] = q if q != float("inf") else None
    return data

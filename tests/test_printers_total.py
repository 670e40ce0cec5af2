"""Every printer of a run is total: progress lines, ``nlqo ask``'s answer lines, EXPLAIN ANALYZE
in text, JSON, DOT and HTML, and the result's JSON, over generated traces that hold every step
kind with every optional field missing (issue 37: a stop step with no terminator score crashed
``nlqo ask`` on every one-fact question)."""

from __future__ import annotations

import json

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.explain import html, render
from nlqo.cli.ask import answer_lines
from nlqo.cli.common import progress_line
from nlqo.explain import analyze
from nlqo.planner.lower import lower
from nlqo.execution.trace import PassageRef, RunResult, Step
from nlqo.kinds import Operator, StepKind
from nlqo.runtime.llm.confidence import Confidence
from nlqo.testing.strategies import chain, plan, star

NODES = (
    "parse",
    "relations",
    "hop-1",
    "hop-2",
    "hop-9",
    "hop-x",
    "round-1",
    "answer",
    "fallback",
    "choice",
    "q1",
    "q2",
    "$root",
    "",
)
texts = st.one_of(st.just(""), st.text(max_size=30))
passages = st.builds(
    PassageRef, id=st.text(max_size=6), title=texts, score=st.floats(allow_nan=False, allow_infinity=False), text=texts
)
figures = st.floats(allow_nan=True, allow_infinity=True)
confidences = st.builds(
    Confidence,
    tokens=st.integers(0, 100),
    mean_logprob=figures,
    min_logprob=figures,
    mean_entropy=figures,
    max_entropy=figures,
    first_margin=figures,  # NaN: a server reported no runner-up
    basis=st.sampled_from(("logits", "top-5")),
    answer=st.one_of(st.none(), st.builds(Confidence, st.integers(0, 9), figures, figures, figures, figures, figures)),
)
steps = st.builds(
    Step,
    node=st.sampled_from(NODES),
    kind=st.sampled_from(StepKind),
    wall_ms=st.floats(0, 1e7),
    prompt_tokens=st.integers(0, 10_000),
    cached_prompt_tokens=st.integers(0, 10_000),
    generated_tokens=st.integers(0, 1000),
    text=texts,
    passages=st.lists(passages, max_size=3).map(tuple),
    terminator_score=st.one_of(st.none(), st.floats(-1, 1)),
    started_ms=st.floats(0, 1e7),
    forced_tokens=st.integers(0, 100),
    note=texts,
    calls=st.integers(0, 5),
    confidence=st.one_of(st.none(), confidences),
)
PLANS = (plan(chain(1)), plan(chain(3)), plan(star(3)))


@st.composite
def results(draw) -> tuple[RunResult, object]:
    """A result with a drawn trace, with or without a logical and a physical plan."""
    logical = draw(st.sampled_from(PLANS))
    physical = lower(logical, force=draw(st.sampled_from(Operator.values())), simple="retrieve")
    with_plan = draw(st.booleans())
    result = RunResult(
        question=draw(texts),
        answer=draw(texts),
        strategy=draw(st.sampled_from(("auto", "linear", "tree", "standard-rag"))),
        supporting=tuple(draw(st.lists(passages, max_size=3))),
        trace=tuple(draw(st.lists(steps, max_size=12))),
        stop_reason=draw(texts),
        hops=draw(st.integers(0, 10)),
        planning_ms=draw(st.floats(0, 1e6)),
        execution_ms=draw(st.floats(0, 1e6)),
        plan=logical if with_plan else None,
        physical=physical if with_plan else None,
    )
    return result, physical


def test_a_stop_step_without_a_score_prints_its_reason_alone():
    assert progress_line(Step(node="answer", kind="stop", text="answer")) == "  [answer] stop (answer)"
    assert (
        progress_line(Step(node="hop-1", kind="stop", text="terminator", terminator_score=0.9))
        == "  [hop-1] stop (terminator, similarity 0.90)"
    )


@settings(max_examples=300)
@given(steps)
def test_every_step_has_a_progress_line_naming_its_node(step):
    line = progress_line(step)
    assert line is not None and line.startswith(f"  [{step.node}] ")


@settings(max_examples=150)
@given(results())
def test_every_result_prints_in_every_format(drawn):
    result, physical = drawn
    lines = answer_lines(result, result.strategy)
    assert lines[0] == (
        result.answer if result.answer.strip() else "(no answer: nothing usable in the retrieved passages)"
    )
    assert len(lines) == 2 + len(result.supporting)
    json.loads(json.dumps(result.to_dict(texts=True)))
    text = analyze.text(result, physical)
    assert text.splitlines()[-1].startswith("(tokens = ")
    data = analyze.to_dict(result, physical)
    assert json.loads(json.dumps(data))["physical"]["operator"] == physical.operator
    assert render.dot(physical.logical, annotations=analyze.actual_annotations(result, physical)).startswith("digraph")
    page = html.render([html.entry(data)])
    assert page.lstrip().lower().startswith("<!doctype html")


@settings(max_examples=50)
@given(results())
def test_a_plan_never_executed_prints_too(drawn):
    _, physical = drawn
    assert "Physical plan: " in analyze.text(None, physical)
    assert "analyze" not in analyze.to_dict(None, physical)


def test_every_operator_has_a_printed_name():
    for operator in Operator:
        physical = attrs.evolve(lower(PLANS[0], simple="retrieve"), operator=operator)
        assert analyze.physical_lines(physical)[0].startswith("Physical plan: ")

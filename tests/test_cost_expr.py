"""The cost-model language's syntax tree: text and tree agree (render, then parse, gives the tree
back), and the direction analysis agrees with evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.cost.expr import BinOp, Call, Name, Neg, Num, evaluate, render, signs
from nlqo.cost.model import CostModel
from nlqo.errors import CostModelError

METRICS = ("depth", "size", "edges")
PARAMS = {"alpha": 2.5, "beta": -1.0}

leaves = st.one_of(
    st.integers(0, 1000).map(lambda n: Num(float(n))),
    st.sampled_from(METRICS + tuple(PARAMS)).map(Name),
)


def _extend(children):
    return st.one_of(
        children.map(Neg),
        st.builds(BinOp, st.sampled_from(["+", "-", "*", "/"]), children, children),
        st.builds(Call, st.sampled_from(["min", "max"]), st.lists(children, min_size=1, max_size=3).map(tuple)),
        children.map(lambda c: Call("abs", (c,))),
    )


exprs = st.recursive(leaves, _extend, max_leaves=12)
values = st.fixed_dictionaries({m: st.integers(0, 20).map(float) for m in METRICS})


@settings(max_examples=300, deadline=None)
@given(exprs, values)
def test_render_then_parse_gives_the_same_tree_and_value(expr, env):
    text = "\n".join(f"param {k} = {v}" for k, v in PARAMS.items()) + f"\ncost = {render(expr)}"
    model = CostModel.parse(text)
    assert model.expression == expr, render(expr)
    assert model.evaluate_values(env) == evaluate(expr, {**env, **PARAMS}) or (
        evaluate(expr, {**env, **PARAMS}) != evaluate(expr, {**env, **PARAMS})  # nan on both sides
    )


@settings(max_examples=300, deadline=None)
@given(exprs, values, st.sampled_from(METRICS))
def test_a_known_direction_holds_when_that_metric_grows(expr, env, metric):
    direction = signs(expr, PARAMS).get(metric)
    if direction is None:
        return
    before = evaluate(expr, {**env, **PARAMS})
    after = evaluate(expr, {**env, metric: env[metric] + 1, **PARAMS})
    if before != before or after != after:  # nan: inf - inf
        return
    assert (after - before) * direction >= -1e-9 * max(1.0, abs(before)), (render(expr), env, metric)


def test_names_keep_their_position_for_messages():
    model = CostModel.parse("cost = depth\n")
    assert model.expression == Name("depth") and (model.expression.line, model.expression.column) == (1, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        ("cost = abs(depth, size)", "line 1, column 8: abs() takes 1 argument, not 2"),
        ("cost = log()", "<string>:1:12: cannot read the cost model here"),
        ("param a = 1\ncost = depth + log(size, a)", "line 2, column 16: log() takes 1 argument, not 2"),
    ],
)
def test_a_call_with_the_wrong_number_of_arguments_is_refused_where_it_is(text, message):
    with pytest.raises(CostModelError) as caught:
        CostModel.parse(text)
    assert message in str(caught.value)


def test_min_and_max_of_one_argument_are_that_argument():
    assert CostModel.parse("cost = min(depth) + max(size)").evaluate_values({"depth": 3.0, "size": 4.0}) == 7.0

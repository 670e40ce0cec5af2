"""The cost-model language's syntax tree: text and tree agree (render, then parse, gives the tree
back), and the direction analysis agrees with evaluation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.optimizer.cost.expr import BinOp, Call, Name, Neg, Num, evaluate, names, render, signs
from nlqo.optimizer.cost.model import CostModel
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
    value = evaluate(expr, {**env, **PARAMS})
    assert model.evaluate_values(env) == value and not math.isnan(value)  # never NaN: a step without a value is +inf


@settings(max_examples=300, deadline=None)
@given(exprs, values, st.sampled_from(METRICS))
def test_a_known_direction_holds_when_that_metric_grows(expr, env, metric):
    direction = signs(expr, PARAMS).get(metric)
    if direction is None:
        return
    before = evaluate(expr, {**env, **PARAMS})
    after = evaluate(expr, {**env, metric: env[metric] + 1, **PARAMS})
    if before == after:  # both +inf (a step without a value), or both -inf
        return
    assert (after - before) * direction >= -1e-9 * max(1.0, abs(before)), (render(expr), env, metric)


def test_names_keep_their_position_for_messages():
    model = CostModel.parse("cost = depth\n")
    assert model.expression == Name("depth") and (model.expression.line, model.expression.column) == (1, 8)


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "cost = abs(depth, size)",
            "<string>:1:8: abs() takes 1 argument, not 2\n  cost = abs(depth, size)\n         ^",
        ),
        (
            "cost = log()",
            "<string>:1:12: cannot read the cost model here (unexpected ')')\n  cost = log()\n             ^",
        ),
        (
            "param a = 1\ncost = depth + log(size, a)",
            "<string>:2:16: log() takes 1 argument, not 2\n  cost = depth + log(size, a)\n                 ^",
        ),
    ],
)
def test_a_call_with_the_wrong_number_of_arguments_is_refused_where_it_is(text, message):
    with pytest.raises(CostModelError) as caught:
        CostModel.parse(text)
    assert str(caught.value) == message


def test_min_and_max_of_one_argument_are_that_argument():
    assert CostModel.parse("cost = min(depth) + max(size)").evaluate_values({"depth": 3.0, "size": 4.0}) == 7.0


def test_evaluate_by_hand():
    env = {"depth": 6.0, "size": 4.0, "alpha": 2.5}
    cases = {
        "depth + size": 10.0,
        "depth - size": 2.0,
        "depth * size": 24.0,
        "depth / size": 1.5,
        "depth / (size - 4)": math.inf,
        "-depth + size": -2.0,
        "-(depth - size)": -2.0,
        "min(depth, size, alpha)": 2.5,
        "max(depth, size, alpha)": 6.0,
        "abs(size - depth)": 2.0,
        "log(size)": math.log(4.0),
        "alpha * depth - size / 2": 13.0,
    }
    for text, value in cases.items():
        model = CostModel.parse(f"param alpha = 2.5\ncost = {text}")
        assert model.evaluate_values({k: v for k, v in env.items() if k != "alpha"}) == value, text
        assert evaluate(model.expression, env) == value, text


@pytest.mark.parametrize(
    "text, directions",
    [
        ("depth / 2", {"depth": 1}),
        ("depth / beta", {"depth": -1}),
        ("depth / zero", {}),  # x / 0 is infinity whatever x is
        ("zero * depth", {"depth": None}),  # 0 * x is 0, but +inf where x is infinite
        ("(depth / zero) * size", {"size": None}),  # was a KeyError: the left side looked constant
        ("0 * depth * 0", {"depth": None}),  # was a KeyError, found by the property test of any formula
        ("depth * half", {"depth": 1}),
        ("half * depth", {"depth": 1}),
        ("depth * beta", {"depth": -1}),
        ("beta * (depth - size)", {"depth": -1, "size": 1}),
        ("-(depth - size)", {"depth": -1, "size": 1}),
        ("-abs(depth)", {"depth": None}),
        ("depth * size", {"depth": None, "size": None}),
        ("depth / size", {"depth": None, "size": None}),
        ("max(depth, -size)", {"depth": 1, "size": -1}),
        ("min(depth, -depth, size)", {"depth": None, "size": 1}),
        ("log(depth) + abs(size)", {"depth": None, "size": None}),  # log(0) has no value: +inf, above log(1)
        ("depth - depth", {"depth": None}),
        ("depth + depth - edges", {"depth": 1, "edges": -1}),
        ("alpha + 2", {}),
    ],
)
def test_signs_by_hand(text, directions):
    params = {"alpha": 2.5, "beta": -1.0, "zero": 0.0, "half": 0.5}
    model = CostModel.parse("\n".join(f"param {k} = {v}" for k, v in params.items()) + f"\ncost = {text}")
    found = signs(model.expression, model.params)
    assert found == directions
    assert {n: repr(d) for n, d in found.items()} == {n: repr(d) for n, d in directions.items()}  # 1, not 1.0


@pytest.mark.parametrize(
    "expr, text",
    [
        (Num(2.5), "2.5"),
        (Num(10.0), "10"),
        (Call("max", (Name("depth"), Name("size"), Num(1.0))), "max(depth, size, 1)"),
        (Neg(BinOp("+", Name("a"), Name("b"))), "-(a + b)"),
        (Neg(BinOp("*", Name("a"), Name("b"))), "-(a * b)"),
        (BinOp("*", Neg(Name("a")), Name("b")), "-a * b"),
        (BinOp("*", BinOp("+", Name("a"), Name("b")), Name("c")), "(a + b) * c"),
        (BinOp("+", BinOp("*", Name("a"), Name("b")), Name("c")), "a * b + c"),
        (BinOp("+", Name("a"), BinOp("*", Name("b"), Name("c"))), "a + b * c"),
        (BinOp("/", Name("a"), BinOp("*", Name("b"), Name("c"))), "a / (b * c)"),
        (BinOp("-", BinOp("-", Name("a"), Name("b")), Name("c")), "a - b - c"),
        (BinOp("-", Name("a"), BinOp("+", Name("b"), Name("c"))), "a - (b + c)"),
    ],
)
def test_render_by_hand(expr, text):
    assert render(expr) == text


@pytest.mark.parametrize("function", [names, evaluate, signs, render])
def test_a_value_that_is_not_an_expression_is_refused(function):
    args = {names: (), evaluate: ({},), signs: ({},), render: ()}[function]
    with pytest.raises(TypeError, match=r"^not a cost expression: 'depth'$"):
        function("depth", *args)
    with pytest.raises(TypeError, match=r"^not a cost expression: 'depth'$"):
        function(Neg("depth"), *args)


def test_an_arity_error_says_how_many_arguments_a_function_takes(monkeypatch):
    from nlqo.optimizer.cost import expr

    monkeypatch.setitem(expr.FUNCTIONS, "clamp", lambda x, lo, hi=math.inf: min(max(x, lo), hi))
    monkeypatch.setitem(expr.ARITY, "clamp", (2, 3))
    monkeypatch.setitem(expr.FUNCTIONS, "hypot", math.hypot)
    monkeypatch.setitem(expr.ARITY, "hypot", (2, 2))
    for text, message in [
        ("cost = clamp(depth)", "clamp() takes at least 2 arguments, not 1"),
        ("cost = hypot(depth)", "hypot() takes 2 arguments, not 1"),
        ("cost = hypot(depth, size, edges)", "hypot() takes 2 arguments, not 3"),
    ]:
        with pytest.raises(CostModelError) as caught:
            CostModel.parse(text)
        assert str(caught.value) == f"<string>:1:8: {message}\n  {text}\n         ^"
    assert (
        CostModel.parse("cost = clamp(depth, 2) + hypot(size, edges)").evaluate_values(
            {"depth": 1.0, "size": 3.0, "edges": 4.0}
        )
        == 7.0
    )


@pytest.mark.parametrize("number", ["1234567", "0.1234567", "1e-07", "2.5", "123456789012.5"])
def test_a_rendered_number_keeps_every_digit_and_reads_back_the_same(number):
    model = CostModel.parse(f"cost = depth * {number}")
    assert model.formula() == f"depth * {number}"
    assert CostModel.parse(f"cost = {model.formula()}").expression == model.expression


@pytest.mark.parametrize(("written", "shown"), [("1000000", "1e+06"), ("0.00001", "1e-05"), ("3.0", "3")])
def test_a_rendered_number_takes_the_short_form_where_it_is_exact(written, shown):
    assert CostModel.parse(f"cost = depth * {written}").formula() == f"depth * {shown}"


def test_the_formula_checker_agrees_on_a_constant_with_more_than_six_digits():
    from nlqo.testing import check_cost_formula
    from nlqo.testing.strategies import chain, plan

    model = CostModel.parse("cost = depth * 1234567 - edges", name="wide")
    assert check_cost_formula(model, plan(chain(3), cost_model=model, seed=None)) == 3 * 1234567 - 3


@pytest.mark.parametrize(
    "text", ["cost = depth * 1e999", "param w = 1e999\ncost = w * depth", "cost = min(depth, -1e999)"]
)
def test_a_number_too_large_for_a_float_is_refused_where_it_is(text):
    with pytest.raises(CostModelError, match=r"^<string>:\d+:\d+: 1e999 is too large a number\n  .*\n *\^$"):
        CostModel.parse(text)


@pytest.mark.parametrize(
    "text, env, value",
    [
        ("1 / depth - size", {"depth": 0.0, "size": 1.0}, math.inf),  # x / 0
        ("-(1 / depth)", {"depth": 0.0}, math.inf),  # the whole formula, not the step: never the best cost
        ("size - 1 / depth", {"depth": 0.0, "size": 1.0}, math.inf),
        ("0 / depth", {"depth": 0.0}, math.inf),
        ("log(depth) - size", {"depth": 0.0, "size": 1.0}, math.inf),  # log(0)
        ("-log(depth - 3)", {"depth": 1.0}, math.inf),  # log of a negative number
        ("depth * 1e300 * 1e300", {"depth": 1.0}, math.inf),  # too large for a float: inf, ordered
        ("-depth * 1e300 * 1e300", {"depth": 1.0}, -math.inf),
        ("depth * 1e300 * 1e300 - size * 1e300 * 1e300", {"depth": 1.0, "size": 1.0}, math.inf),  # inf - inf
        ("min(depth * 1e300 * 1e300 - 1e300 * 1e300, 1)", {"depth": 1.0}, math.inf),  # a NaN is not lost by min
        ("0 * (depth * 1e300 * 1e300)", {"depth": 1.0}, math.inf),  # 0 * inf
        ("depth - size", {"depth": math.nan, "size": 1.0}, math.inf),  # a metric that gave NaN
        ("max(depth, 2) / 4 - log(size)", {"depth": 6.0, "size": 1.0}, 1.5),  # defined: as before
    ],
)
def test_a_formula_with_a_step_without_a_value_is_plus_infinity(text, env, value):
    """docs/cost-models.md, "Arithmetic" (issue 52): before, log(0) raised ValueError (an internal error
    in nlqo plan), -(1 / 0) was -inf (the best cost) and inf - inf was NaN, which no order can rank."""
    model = CostModel.parse(f"cost = {text}")
    assert model.evaluate_values(env) == value
    assert evaluate(model.expression, env) == value

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nlqo.cost import CostContext, Shape, builtin_metrics, load_cost_model
from nlqo.cost.metrics import structure_of
from nlqo.cost.shape import FIELDS
from nlqo.testing import check_cost_deterministic, check_monotone
from nlqo.testing.strategies import cost_models, plan, queries
from nlqo.cost.model import CostModel
from nlqo.errors import CostModelError, ConfigError
from nlqo.plan import ROOT, Tree
from nlqo.resources import available
from nlqo.syntax import parse

Q = parse('q1 = (?a, "p", "x")\nq2 = (?a, "r", ?b)\nq3 = (?b, "s", "y")\nq4 = (?a, "t", "z")\nanswer ?a')
ORDER = (ROOT, "q1", "q2", "q3", "q4")
# root -> q1, q2 -> q3, q4
TREE = Tree.build(ROOT, {"q1": ROOT, "q2": ROOT, "q4": ROOT, "q3": "q2"}, ORDER)
CTX = CostContext(Q, {("q1", "q2"): "sibling", ("q1", "q4"): "sibling", ("q2", "q4"): "none", ("q2", "q3"): "parent"})


def test_structural_metrics_by_hand():
    terms = load_cost_model("structural").terms(TREE, CTX)
    # size 4; edges: 4 tree edges + 2 sibling pairs under the root; depth 2; imbalance |1 - 0| = 1
    assert terms == {"size": 4.0, "edges": 6.0, "depth": 2.0, "imbalance": 1.0}
    assert load_cost_model("structural").evaluate(TREE, CTX).total == 2 + 1 - 4 - 6


def test_default_model_is_the_paper_formula_with_alpha_10():
    model = load_cost_model("default")
    assert model.params == {"alpha": 10.0}
    assert model.formula() == "depth + imbalance - size - edges - alpha * similarity"
    assert model.evaluate_values({"depth": 2, "imbalance": 1, "size": 4, "edges": 6, "similarity": 0.5}) == -12.0


def test_params_can_be_overridden_and_unknown_ones_are_refused():
    model = load_cost_model("default").with_params(alpha=1)
    assert model.evaluate_values({"depth": 0, "imbalance": 0, "size": 0, "edges": 0, "similarity": 0.5}) == -0.5
    with pytest.raises(CostModelError, match="no parameter"):
        model.with_params(beta=2)


def test_user_metric_registered_by_name():
    def leaves_under_root(tree, ctx):
        return float(len(tree.children[ROOT]))

    model = CostModel.parse("cost = 2 * roots - depth", metrics={"roots": leaves_under_root})
    assert model.evaluate(TREE, CTX).total == 2 * 3 - 2


def test_user_cost_file_on_the_search_path(tmp_path, monkeypatch):
    (tmp_path / "cost_models").mkdir()
    (tmp_path / "cost_models" / "mine.cost").write_text("param w = 0.5\ncost = w * depth - size\n")
    monkeypatch.setenv("NLQO_PATH", str(tmp_path))
    model = load_cost_model("mine")
    assert model.evaluate(TREE, CTX).total == 0.5 * 2 - 4
    assert "mine" in available("cost_models", ".cost")


@pytest.mark.parametrize(
    "text, message",
    [
        ("cost = depth + nothing", r"1:16: unknown name 'nothing'"),
        (
            "param a = 1\ncost = depth *",
            r"2:14: cannot read the cost model here \(the text ends in the middle of a statement\)",
        ),
        ("cost = depth *\n", r"1:15: cannot read the cost model here \(the line ends in the middle of a statement\)"),
        ("param a = 1", "no 'cost = ...' statement"),
        ("cost = sqrt(depth)", "unknown function 'sqrt'"),
    ],
)
def test_bad_cost_files_say_where(text, message):
    with pytest.raises(CostModelError, match=message):
        CostModel.parse(text)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: .*default.*structural"):
        load_cost_model("nope")


def test_similarity_without_embedder_is_a_clear_error():
    with pytest.raises(CostModelError, match="needs an embedder"):
        load_cost_model("default").evaluate(TREE, CTX)


@settings(max_examples=80, deadline=None)
@given(queries(max_atoms=6), cost_models(), st.integers(0, 3))
def test_cost_rules_give_one_cost_whatever_the_order_of_their_inputs(query, model, seed):
    """Rebuilt tree, reordered relations, fresh context: a metric that leaned on dict order,
    identity or a shared cache would give another number."""
    check_cost_deterministic(model, plan(query, cost_model=model, seed=seed), seed=seed)


def test_the_determinism_check_catches_a_metric_that_depends_on_order():
    from nlqo.testing import InvariantError

    def first_child(tree, ctx):
        return float(len(ctx.relations) and list(ctx.relations)[0][0] == "q1")

    model = CostModel.parse("cost = depth + first_child", metrics={"first_child": first_child})
    p = plan(Q, cost_model=model, seed=None)
    with pytest.raises(InvariantError, match="gives Cost"):
        for seed in range(10):
            check_cost_deterministic(model, p, seed=seed)


@settings(max_examples=200)
@given(st.builds(Shape, size=st.integers(0, 9), height=st.integers(0, 9), imbalance=st.integers(0, 9), edges=st.integers(0, 9), leaves=st.integers(0, 9)),
       st.sampled_from(FIELDS), st.integers(1, 4))  # fmt: skip
def test_builtin_metrics_move_as_they_declare(shape, field, step):
    for metric in builtin_metrics().values():
        if structure_of(metric) is not None:
            check_monotone(metric, shape, field, step)


def test_a_wrong_declaration_is_caught():
    from nlqo.cost import structural
    from nlqo.testing import InvariantError

    @structural(height=1)
    def shallow_is_worse(shape):
        return -shape.height

    with pytest.raises(InvariantError, match="declares direction \\+1 in height"):
        check_monotone(shallow_is_worse, Shape(), "height")


def test_cost_directions_follow_signs_and_functions():
    assert CostModel.parse("cost = -depth").directions() == {"height": -1}
    assert CostModel.parse("param w = -2\ncost = w * edges + max(imbalance, 1)").directions() == {
        "edges": -1,
        "imbalance": 1,
    }
    assert CostModel.parse("cost = abs(depth - 2) + size / depth").directions() == {"height": None, "size": None}
    assert CostModel.parse("cost = similarity").directions() == {} and CostModel.parse(
        "cost = similarity"
    ).semantic == {"similarity"}

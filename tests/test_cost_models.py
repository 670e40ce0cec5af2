import json
import math
import re
from pathlib import Path

import attrs
import lark
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nlqo.optimizer.cost import CostContext, Shape, builtin_metrics, load_cost_model
from nlqo.optimizer.cost.metrics import structure_of
from nlqo.optimizer.cost.shape import FIELDS
from nlqo.cli import main
from nlqo.explain import formats, render
from nlqo.testing import HashEmbedder, check_cost_deterministic, check_cost_formula, check_monotone
from nlqo.testing.oracles import check_optimal
from nlqo.testing.strategies import cost_models, plan, queries
from nlqo.optimizer.cost.model import CostModel
from nlqo.errors import CostModelError, ConfigError
from nlqo.optimizer.plan import ROOT, Tree
from nlqo.common.resources import available
from nlqo.ir.syntax import parse

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
    from nlqo.optimizer.cost import structural
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


def test_cost_files_read_params_description_and_defaults():
    model = CostModel.parse(
        '# a comment\ndescription "Deep \\"and\\" narrow"\nparam w = -2\nparam v = .5\ncost = w * depth + v'
    )
    assert model.params == {"w": -2.0, "v": 0.5}
    assert model.description == 'Deep "and" narrow'
    assert (model.name, model.source) == ("inline", "<string>")
    assert model.evaluate_values({"depth": 3.0}) == -5.5
    assert CostModel.parse("cost = depth").description == ""
    overridden = CostModel.parse("param w = 1\ncost = w * depth", params={"w": 4.0})
    assert overridden.params == {"w": 4.0} and overridden.evaluate_values({"depth": 2.0}) == 8.0


def caret(line: str, column: int) -> str:
    """The two lines a located error ends with: the line, and a caret under the column."""
    return f"\n  {line}\n  {' ' * (column - 1)}^"


METRICS = "(metrics: depth, edges, imbalance, leaves, similarity, size)"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "cost = depth ) size",
            "m.cost:1:14: cannot read the cost model here (unexpected ')')" + caret("cost = depth ) size", 14),
        ),
        (
            "cost = depth @ size",
            "m.cost:1:14: cannot read the cost model here (unexpected '@')" + caret("cost = depth @ size", 14),
        ),
        (
            "param a = 1\ncost = depth ) a\n# end\n",
            "m.cost:2:14: cannot read the cost model here (unexpected ')')" + caret("cost = depth ) a", 14),
        ),
        (
            "param a = 1\ncost = depth *",
            "m.cost:2:14: cannot read the cost model here (the text ends in the middle of a statement)"
            + caret("cost = depth *", 14),
        ),
        (
            "cost = depth +\n",
            "m.cost:1:15: cannot read the cost model here (the line ends in the middle of a statement)"
            + caret("cost = depth +", 15),
        ),
        (
            'description "fewer waves\ncost = depth',
            'm.cost:1:13: cannot read the cost model here (a string that does not end: close it with " on the same line)'
            + caret('description "fewer waves', 13),
        ),
        (
            'description "a\\q"\ncost = depth',
            'm.cost:1:15: malformed string (Invalid \\escape); escapes are those of JSON: \\\\ \\" \\n \\t \\uXXXX'
            + caret('description "a\\q"', 15),
        ),
        (
            "cost = depth\n\ncost = size",
            "m.cost:3:1: a second 'cost =' statement (the first is on line 1); a cost model has one"
            + caret("cost = size", 1),
        ),
        ("param a = 1\n", "m.cost: no 'cost = ...' statement; add one, e.g. cost = depth - size"),
        ("", "m.cost: no 'cost = ...' statement; add one, e.g. cost = depth - size"),  # was an AttributeError
        ("# nothing yet\n", "m.cost: no 'cost = ...' statement; add one, e.g. cost = depth - size"),
        (
            "cost = zeta + alpha",
            f"m.cost:1:15: unknown name 'alpha': not a param and not a metric {METRICS}; declare a param with "
            "'param alpha = NUMBER', or register a Python metric under the entry point group nlqo.metrics "
            "(docs/cost-models.md)" + caret("cost = zeta + alpha", 15),
        ),
        (
            "cost = sqrt(depth)",
            "m.cost:1:8: unknown function 'sqrt' (known: min, max, abs, log)" + caret("cost = sqrt(depth)", 8),
        ),
        (
            "param a = 1\ncost = depth + log(size, a)",
            "m.cost:2:16: log() takes 1 argument, not 2" + caret("cost = depth + log(size, a)", 16),
        ),
        ("param a = 1e999\ncost = a", "m.cost:1:11: 1e999 is too large a number" + caret("param a = 1e999", 11)),
    ],
)
def test_cost_file_errors_in_full(text, message):
    """Every error is FILE:LINE:COLUMN: message, with the line and a caret (issue 52); before, some said
    'm.cost: line 1, column 8:', an unterminated string was 'unexpected text', and a bad escape crashed."""
    with pytest.raises(CostModelError) as caught:
        CostModel.parse(text, source="m.cost")
    assert str(caught.value) == message


def test_a_cost_file_error_shows_the_line_the_parser_counted():
    # a form feed in a comment, a line separator in a description and Windows line ends are not line breaks
    # for the parser, so they must not shift the line the message shows
    for text in [
        "# a\fb\ncost = depth ) a",
        'description "a\u2028b"\ncost = depth ) a',
        "param a = 1\r\ncost = depth ) a\r\n",
    ]:
        with pytest.raises(CostModelError) as caught:
            CostModel.parse(text)
        assert str(caught.value) == "<string>:2:14: cannot read the cost model here (unexpected ')')" + caret(
            "cost = depth ) a", 14
        )


def test_with_params_changes_only_the_named_ones():
    model = CostModel.parse("param a = 1\nparam b = 2\ncost = a * depth + b", name="two")
    changed = model.with_params(b=5)
    assert changed.params == {"a": 1.0, "b": 5} and model.params == {"a": 1.0, "b": 2.0}
    assert changed.evaluate_values({"depth": 3.0}) == 8.0
    with pytest.raises(CostModelError) as caught:
        model.with_params(gamma=1, beta=2, a=3)
    assert str(caught.value) == "cost model 'two' has no parameter(s) beta, gamma"


def test_evaluate_gives_the_total_and_every_term():
    cost = load_cost_model("structural").evaluate(TREE, CTX)
    assert cost.total == -7.0
    assert cost.terms == {"depth": 2.0, "edges": 6.0, "imbalance": 1.0, "size": 4.0}
    leafy = CostModel.parse("cost = leaves - size / 2").evaluate(TREE, CTX)
    assert (leafy.total, leafy.terms) == (1.0, {"leaves": 3.0, "size": 4.0})


def test_shape_cost_counts_semantic_metrics_as_zero():
    shape = Shape(size=4, height=2, imbalance=1, edges=6, leaves=3)
    assert load_cost_model("default").shape_cost(shape) == 2 + 1 - 4 - 6
    assert load_cost_model("structural").shape_cost(shape) == 2 + 1 - 4 - 6
    assert CostModel.parse("cost = 2 * leaves + similarity - 1").shape_cost(shape) == 5.0


def test_directions_skip_semantic_metrics_wherever_they_sort():
    def a_sem(tree, ctx):
        return 0.0

    model = CostModel.parse("cost = a_sem + depth - leaves", metrics={"a_sem": a_sem})
    assert repr(model.directions()) == "{'height': 1, 'leaves': -1}"
    assert model.semantic == {"a_sem"} and model.names == {"a_sem", "depth", "leaves"}

    def odd(tree, ctx):
        return 1.0

    odd.structure = "declared by hand, not with structural()"
    assert CostModel.parse("cost = odd + depth", metrics={"odd": odd}).semantic == {"odd"}


def test_structural_refuses_unknown_fields_and_directions():
    from nlqo.optimizer.cost import structural

    fields = "size, height, imbalance, edges, leaves"
    with pytest.raises(CostModelError) as caught:
        structural(width=1)
    assert str(caught.value) == f"structural(): fields are {fields} and directions +1 or -1, got {{'width': 1}}"
    with pytest.raises(CostModelError) as caught:
        structural(height=2)
    assert str(caught.value) == f"structural(): fields are {fields} and directions +1 or -1, got {{'height': 2}}"

    @structural(height=-1, size=1)
    def shallow(shape):
        return shape.size - shape.height

    assert structure_of(shallow).directions == {"height": -1, "size": 1}
    assert structure_of(shallow).of_shape(Shape(size=5, height=2)) == 3
    assert shallow(TREE, CTX) == 2.0


def test_the_context_orients_relations_and_caches_shapes():
    from nlqo.kinds import RelationKind

    assert CTX.relation("q2", "q3") == RelationKind.PARENT
    assert CTX.relation("q3", "q2") == RelationKind.CHILD
    assert CTX.relation("q2", "q1") == RelationKind.SIBLING
    assert CTX.relation("q3", "q4") == RelationKind.NONE
    ctx = CostContext(Q, dict(CTX.relations))
    first = ctx.shape(TREE)
    assert first == Shape(size=4, height=2, imbalance=1, edges=6, leaves=3, max_child=1, min_child=0)
    assert ctx.shape(TREE) is first


def test_shapes_by_hand():
    from nlqo.optimizer.cost.shape import shape_of

    # r -> a, b; a -> c, d (siblings); c -> e
    kids = {"r": ("a", "b"), "a": ("c", "d"), "c": ("e",)}
    related = lambda x, y: {x, y} == {"c", "d"}  # noqa: E731
    assert shape_of("r", kids, related) == Shape(
        size=6, height=3, imbalance=2, edges=6, leaves=3, max_child=2, min_child=0
    )
    assert shape_of("r", kids, related, synthetic_root="r") == Shape(
        size=5, height=3, imbalance=2, edges=6, leaves=3, max_child=2, min_child=0
    )
    # the imbalance deep inside (under a: 2 against 0) outlasts a root with one child
    deep = {"r": ("a",), "a": ("b", "c"), "b": ("d",), "d": ("e",)}
    assert shape_of("r", deep, lambda x, y: False, synthetic_root="r") == Shape(
        size=5, height=4, imbalance=2, edges=5, leaves=2, max_child=3, min_child=3
    )
    # balanced branches of height 1 (no spread); a chain (one child each: no spread either)
    no = lambda x, y: False  # noqa: E731
    assert shape_of("r", {"r": ("a", "b"), "a": ("c",), "b": ("d",)}, no, synthetic_root="r") == Shape(
        size=4, height=2, imbalance=0, edges=4, leaves=2, max_child=1, min_child=1
    )
    assert shape_of("r", {"r": ("a",), "a": ("b",)}, no, synthetic_root="r").imbalance == 0
    # an imbalance inside the first child outlasts a second child as tall as the first
    two = {"r": ("a", "b"), "a": ("x", "y"), "x": ("z",), "z": ("w",), "b": ("p",), "p": ("q",), "q": ("s",)}
    assert shape_of("r", two, no, synthetic_root="r") == Shape(
        size=9, height=4, imbalance=2, edges=9, leaves=3, max_child=3, min_child=3
    )
    assert shape_of("r", {}, related) == Shape() and shape_of("r", {}, related, synthetic_root="r") == Shape(
        size=0, leaves=0
    )


def test_trees_walk_in_order():
    assert list(TREE.preorder()) == [(ROOT, 0), ("q1", 1), ("q2", 1), ("q3", 2), ("q4", 1)]
    assert list(TREE.preorder("q2", 1)) == [("q2", 1), ("q3", 2)]
    assert list(TREE.postorder()) == ["q1", "q3", "q2", "q4", ROOT]
    assert list(TREE.postorder("q2")) == ["q3", "q2"]
    assert TREE.heights == {ROOT: 2, "q1": 0, "q2": 1, "q3": 0, "q4": 0}
    assert TREE.levels() == [("q1", "q3", "q4"), ("q2",), (ROOT,)]
    assert TREE.subtree("q2") == Tree("q2", (("q3", "q2"),), ("q2", "q3"))
    assert TREE.nodes == ORDER
    # built from a mapping in any order, the pairs follow the node order
    assert Tree.build(ROOT, {"q4": ROOT, "q3": "q2", "q2": ROOT}, ORDER) == Tree(
        ROOT, (("q2", ROOT), ("q3", "q2"), ("q4", ROOT)), (ROOT, "q2", "q3", "q4")
    )
    assert Tree.build(ROOT, {"a": "b", "b": ROOT}, (ROOT, "b", "a", "c")) == Tree(
        ROOT, (("b", ROOT), ("a", "b")), (ROOT, "b", "a")
    )


def test_plan_labels_and_textualised_trees():
    from nlqo.optimizer.plan import Cost, Plan, textualise

    assert textualise(Q, TREE) == "a p x; b s y; a r b; a t z"
    assert textualise(Q, TREE, "q2") == "b s y; a r b"
    plan_ = Plan(Q, TREE, Cost(0.0, {}))
    assert plan_.label(ROOT) == "Answer ?a" and plan_.label("q3") == "?b s y"
    assert plan_.atom(ROOT) is None and plan_.atom("q2") == Q.atom("q2")
    asked = attrs.evolve(parse('q1 = (?a, "p", "x")\nq2 = (?b, "r", ?a)\nanswer ?a, q2'), question="What is it?")
    assert Plan(asked, Tree.build(ROOT, {"q1": ROOT}, (ROOT, "q1")), Cost(0.0, {})).label(ROOT) == (
        "Answer ?a, q2: What is it?"
    )


class _Recorder:
    """An embedder that records what it was asked to embed."""

    def __init__(self):
        from nlqo.testing import HashEmbedder

        self.inner, self.calls = HashEmbedder(), []

    def encode(self, texts, *, kind="passage"):
        self.calls.append((tuple(texts), kind))
        return self.inner.encode(texts, kind=kind)


def test_similarity_embeds_the_textualised_tree_and_the_question_once():
    import numpy as np

    from nlqo.optimizer.cost.metrics import similarity
    from nlqo.testing import HashEmbedder

    embedder = _Recorder()
    ctx = CostContext(attrs.evolve(Q, question="Which a is p x?"), dict(CTX.relations), embedder=embedder)
    text, question = "a p x; b s y; a r b; a t z", "Which a is p x?"
    expected = float(np.dot(*HashEmbedder().encode([text, question])))
    assert similarity(TREE, ctx) == pytest.approx(expected) and expected < 0.99
    assert similarity(TREE, ctx) == pytest.approx(expected)
    assert embedder.calls == [((text,), "query"), ((question,), "query")]
    assert similarity(Tree.build(ROOT, {}, (ROOT,)), ctx) == 0.0
    assert len(embedder.calls) == 2
    with pytest.raises(CostModelError) as caught:
        CostContext(Q).embed("x")
    assert str(caught.value) == (
        "this cost model uses 'similarity', which needs an embedder; pass one, or use the 'structural' cost model"
    )


def test_metrics_from_an_installed_package(tmp_path, monkeypatch):
    (tmp_path / "mymetrics.py").write_text(
        "from nlqo.optimizer.cost import structural\n\n\n@structural(height=1)\ndef twice_depth(shape):\n    return 2 * shape.height\n"
    )
    dist = tmp_path / "mymetrics-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mymetrics\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[nlqo.metrics]\ntwice_depth = mymetrics:twice_depth\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from nlqo.optimizer.cost import registry

    assert set(registry()) == {"size", "edges", "depth", "imbalance", "similarity", "leaves", "twice_depth"}
    model = CostModel.parse("cost = twice_depth - size")
    assert model.evaluate(TREE, CTX).total == 0.0 and model.directions() == {"height": 1, "size": -1}


def test_load_cost_model_by_name_path_and_with_overrides(tmp_path):
    assert load_cost_model().name == "default" and load_cost_model().params == {"alpha": 10.0}
    (tmp_path / "mine.cost").write_text("param w = 0.5\ncost = w * depth - roots\n")

    def roots(tree, ctx):
        return float(len(tree.children[ROOT]))

    model = load_cost_model("mine", path=[tmp_path], metrics={"roots": roots}, params={"w": 2.0})
    assert (model.name, model.source, model.params) == ("mine", str(tmp_path / "mine.cost"), {"w": 2.0})
    assert model.evaluate(TREE, CTX).total == 2.0 * 2 - 3
    assert load_cost_model(str(tmp_path / "mine.cost"), metrics={"roots": roots}).params == {"w": 0.5}
    with pytest.raises(CostModelError, match=r"mine.cost:2:20: unknown name 'roots'"):
        load_cost_model("mine", path=[tmp_path])


# --- arithmetic without a value, and any formula at all (issue 52) -----------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def strict_json(text: str):
    """``text`` as JSON, refusing what Python's json writes but JSON has not: NaN, Infinity, -Infinity."""

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("formula", ["1 / depth - size", "log(depth) - size"])
@pytest.mark.parametrize("fmt", ["text", "json", "dot", "html"])
def test_a_formula_without_a_value_on_a_leaf_plans_and_prints_valid_json(tmp_path, capsys, formula, fmt):
    """A leaf's subtree has depth 0, where 1 / depth and log(depth) have no value: before, 'nlqo plan'
    ended in an internal error (OverflowError, ValueError), and --format json printed Infinity."""
    model = tmp_path / "edge.cost"
    model.write_text(f"cost = {formula}\n")
    code = main(["plan", str(EXAMPLES / "older.nlqo"), "--cost-model", str(model), "--format", fmt])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    if fmt == "json":
        data = strict_json(out)
        leaves = [n for n in data["nodes"] if n["id"] in ("q1", "q2")]
        assert [n["cost"]["total"] for n in leaves] == ["inf", "inf"]
        assert isinstance(data["cost"]["total"], float) and data["cost"]["total"] < 0
    elif fmt == "text":
        assert "(cost=inf depth=0 size=1)" in out
    elif fmt == "html":
        assert "Infinity" not in out and "NaN" not in out


NAMES = ("depth", "size", "edges", "imbalance", "leaves", "similarity", "w")
NUMBERS = ("0", "1", "2.5", "0.0", "1e300", "1e-300", "1e308")


def formulas() -> st.SearchStrategy[str]:
    """Cost files whose formula mixes the metrics and a parameter with every operator and function, and
    numbers that make steps without a value (x / 0, log(0), inf - inf) likely."""
    leaf = st.sampled_from(NAMES + NUMBERS)

    def extend(inner):
        return st.one_of(
            inner.map(lambda a: f"-{a}"),
            inner.map(lambda a: f"({a})"),
            st.tuples(inner, st.sampled_from("+-*/"), inner).map(" ".join),
            st.tuples(st.sampled_from(["log", "abs"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(st.sampled_from(["min", "max"]), st.lists(inner, min_size=1, max_size=3)).map(
                lambda t: f"{t[0]}({', '.join(t[1])})"
            ),
        )

    expression = st.recursive(leaf, extend, max_leaves=10)
    param = st.sampled_from(["0", "-1", "3", "1e308", "-1e-308"])
    return st.builds(lambda w, e: f"param w = {w}\ncost = {e}\n", param, expression)


def grammar_texts() -> st.SearchStrategy[str]:
    """Any text of grammar/cost.lark, its names and numbers drawn from those above."""
    from hypothesis.extra.lark import from_lark
    from nlqo.common.resources import builtin_dir

    grammar = lark.Lark((builtin_dir("grammar") / "cost.lark").read_text(), parser="lalr")
    return from_lark(
        grammar,
        explicit={"NAME": st.sampled_from(NAMES + ("sqrt", "param", "zeta")), "NUMBER": st.sampled_from(NUMBERS)},
    )


LOCATED = re.compile(r"drawn\.cost:(\d+):(\d+): [^\n]+\n  ([^\n]*)\n  ( *)\^")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(formulas(), grammar_texts()))
def test_any_cost_formula_gives_a_plan_or_a_located_error_and_strict_json(text):
    try:
        model = CostModel.parse(text, name="drawn", source="drawn.cost")
    except CostModelError as exc:
        message = str(exc)
        located = LOCATED.fullmatch(message)
        assert located or message == "drawn.cost: no 'cost = ...' statement; add one, e.g. cost = depth - size", message
        if located:  # the caret is under the column the message names (of a long line, a cut around it)
            line, column, shown, pad = int(located[1]), int(located[2]), located[3], located[4]
            assert shown[len(pad) : len(pad) + 1] == text.split("\n")[line - 1][column - 1 : column], message
        return
    embedder = HashEmbedder()
    planned = plan(Q, cost_model=model, embedder=embedder)  # never raises: a plan whatever the formula
    assert not math.isnan(planned.cost.total)
    check_cost_formula(model, planned, embedder=embedder)  # a second evaluator agrees, infinities included
    costs = render.node_costs(planned, model, CostContext(planned.query, planned.relations, embedder))
    view = formats.LogicalView(planned, model=model, costs=costs)
    for fmt in ("text", "dot", "html"):
        formats.render(view, fmt)
    data = strict_json(formats.render(view, "json"))
    for cost in [data["cost"], *(n["cost"] for n in data["nodes"])]:
        for value in [cost["total"], *cost["terms"].values()]:
            assert isinstance(value, float) and math.isfinite(value) or value in ("inf", "-inf"), (text, value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(formulas().filter(lambda text: "similarity" not in text), queries(max_atoms=5), st.integers(0, 3))
def test_a_plan_that_says_exact_is_optimal_under_any_structural_formula(text, query, seed):
    """Infinities included: the search prunes by the directions the formula declares, so a step that
    jumps to inf (log(0), 1 / 0) must not make it drop the best tree (log lost its direction for this)."""
    try:
        model = CostModel.parse(text, name="drawn")
    except CostModelError:
        return
    check_optimal(plan(query, cost_model=model, seed=seed), model)

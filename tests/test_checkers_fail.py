"""Every clause of the public checkers is seen to fail: a hand-made broken plan, cost model or metric
for each, rejected with that clause's message. A checker never seen to fail may not be able to."""

from __future__ import annotations

import itertools
import math
import re

import attrs
import pytest

from nlqo.optimizer.cost import CostModel, Shape, load_cost_model, structural
from nlqo.optimizer.cost.metrics import Structure
from nlqo.kinds import RelationKind
from nlqo.optimizer.optimizer import optimize
from nlqo.optimizer.plan import ROOT, LeftOut, Plan, Tree
from nlqo.ir.syntax import parse
from nlqo.testing.fakes import HashEmbedder
from nlqo.testing import InvariantError, check_cost_deterministic, check_cost_formula, check_monotone, check_plan

STRUCTURAL = load_cost_model("structural")

PINNED = parse(
    'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nq3 = (?c, "capital of", ?n)\n'
    'q4 = (?x, "directed", "Alien")\nrelation q2 parent q1\nrelation q4 none q1\nanswer ?c\n'
)
"""Planned as $root -> q2 -> q1 and $root -> q3; q4 is left out (it reaches no answer)."""
SIBLINGS = parse(
    'q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nq3 = (?c, "capital of", ?n)\n'
    "relation q2 sibling q3\nanswer ?c\n"
)
ANSWER_ATOM = parse('q1 = (?d, "directed", "Jaws")\nq2 = (?d, "born in", ?c)\nanswer q2\n')


def planned(query) -> Plan:
    return check_plan(optimize(query, cost_model=STRUCTURAL), source=query)


def with_tree(plan: Plan, parent: dict[str, str], **changes) -> Plan:
    order = plan.tree.order + tuple(n for n in parent if n not in plan.tree.order)
    return attrs.evolve(plan, tree=Tree.build(ROOT, parent, order), **changes)


def with_relation(plan: Plan, pair: tuple[str, str], kind: RelationKind) -> dict:
    relations = dict(plan.relations)
    relations[pair] = kind
    return relations


def test_the_base_plans_are_as_the_cases_assume():
    assert planned(PINNED).tree.parent == (("q1", "q2"), ("q2", ROOT), ("q3", ROOT))
    assert planned(PINNED).left_out_ids == ("q4",)
    assert planned(SIBLINGS).tree.parent == (("q1", "q2"), ("q2", ROOT), ("q3", ROOT))
    assert planned(ANSWER_ATOM).tree.parent == (("q1", "q2"), ("q2", ROOT))


def broken_plans():
    p, s, a = planned(PINNED), planned(SIBLINGS), planned(ANSWER_ATOM)
    yield "root", attrs.evolve(p, tree=attrs.evolve(p.tree, root="q2")), "the root is 'q2', not '$root'"
    twice = Tree(ROOT, (("q1", "q2"), ("q1", ROOT), ("q2", ROOT), ("q3", ROOT)), p.tree.order)
    yield "atom twice", attrs.evolve(p, tree=twice), "an atom appears twice in the tree"
    yield (
        "foreign atom",
        with_tree(p, {"q1": "q2", "q2": ROOT, "q3": ROOT, "q9": ROOT}),
        "q9 is in the tree but not in the plan's query",
    )
    dangling = Tree(ROOT, (("q1", "q7"), ("q2", ROOT), ("q3", ROOT)), p.tree.order)
    yield "no way up", attrs.evolve(p, tree=dangling), "q7's parent chain does not reach the root"
    cycle = Tree(ROOT, (("q1", "q2"), ("q2", "q1"), ("q3", ROOT)), p.tree.order)
    yield "cycle", attrs.evolve(p, tree=cycle), "the tree has a cycle through q1"
    into_a_cycle = Tree(ROOT, (("q3", "q1"), ("q1", "q2"), ("q2", "q1")), p.tree.order)  # q3 leads into it
    yield "a way into a cycle", attrs.evolve(p, tree=into_a_cycle), "the tree has a cycle through q1"
    yield (
        "parent pin",
        with_tree(
            p, {"q1": "q3", "q2": ROOT, "q3": ROOT}, relations=with_relation(p, ("q1", "q3"), RelationKind.CHILD)
        ),
        "pin 'relation q2 parent q1' not kept: q1 hangs under q3",
    )
    yield (
        "sibling pin",
        with_tree(
            s, {"q1": "q2", "q2": ROOT, "q3": "q2"}, relations=with_relation(s, ("q2", "q3"), RelationKind.PARENT)
        ),
        "pin 'relation q2 sibling q3' not kept: one hangs under the other",
    )
    yield (
        "sibling pin, the other way",
        with_tree(
            s, {"q1": ROOT, "q2": "q3", "q3": ROOT}, relations=with_relation(s, ("q2", "q3"), RelationKind.CHILD)
        ),
        "pin 'relation q2 sibling q3' not kept: one hangs under the other",
    )
    yield (
        "root child",
        with_tree(s, {"q1": ROOT, "q2": ROOT, "q3": ROOT}),
        "q1 hangs under the root but is no answer atom, mentions no answer variable and is pinned as no one's "
        "sibling that does",
    )
    yield (
        "none pair as an edge",
        with_tree(p, {"q1": "q2", "q2": ROOT, "q3": "q1"}),
        "edge q1 -> q3 is not allowed by the relations (q1 none q3)",
    )
    unrelated = {pair: kind for pair, kind in p.relations.items() if pair != ("q1", "q3")}
    yield (
        "an edge the relations do not mention",
        with_tree(p, {"q1": "q2", "q2": ROOT, "q3": "q1"}, relations=unrelated),
        "edge q1 -> q3 is not allowed by the relations (q1 none q3)",
    )
    yield "left out twice", attrs.evolve(p, left_out=p.left_out * 2), "an atom is left out twice: ['q4', 'q4']"
    yield "answer atom", with_tree(a, {}), "answer atom q2 is neither under the root nor left out"
    rootless = Tree(ROOT, (), ("q1", "q2"))  # nothing placed, and the root not even in the node order
    yield "empty tree", attrs.evolve(a, tree=rootless), "answer atom q2 is neither under the root nor left out"
    yield "no reason", attrs.evolve(p, left_out=(LeftOut("q4", ""),)), "q4 is left out without a reason"
    placed = attrs.evolve(p, left_out=(*p.left_out, LeftOut("q3", "x")))
    yield "placed and left out", placed, "['q3'] are both placed and left out"
    yield "lost atom", with_tree(s, {"q1": "q2", "q2": ROOT}), "['q3'] are neither placed nor left out"


CASES = list(broken_plans())


@pytest.mark.parametrize("plan, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_plan_rejects_each_broken_plan_with_its_message(plan, message):
    with pytest.raises(InvariantError) as caught:
        check_plan(plan)
    assert str(caught.value) == message


def test_check_plan_sees_an_atom_lost_before_the_plan_only_with_the_source():
    p = attrs.evolve(planned(PINNED), left_out=())  # q4 was dropped by a rewrite and then forgotten
    assert check_plan(p) is p  # the plan's own query no longer holds q4
    with pytest.raises(InvariantError, match=r"\['q4'\] are neither placed nor left out"):
        check_plan(p, source=PINNED)


def test_check_cost_deterministic_rejects_a_metric_with_hidden_state():
    counter = itertools.count()
    flaky = CostModel.parse("cost = depth + calls", name="flaky", metrics={"calls": lambda tree, ctx: next(counter)})
    plan = optimize(SIBLINGS, cost_model=flaky)
    with pytest.raises(InvariantError, match="cost model 'flaky' gives .* and then"):
        check_cost_deterministic(flaky, plan)


def test_check_cost_deterministic_rejects_a_metric_that_reads_dict_order():
    def first_pair(tree, ctx):
        return float(int(next(iter(ctx.relations))[0][1:]))  # which pair happens to come first

    ordered = CostModel.parse("cost = depth + first", name="ordered", metrics={"first": first_pair})
    plan = optimize(PINNED, cost_model=ordered)
    with pytest.raises(InvariantError, match="cost model 'ordered' gives"):
        for seed in range(20):  # some shuffle must change the first pair
            check_cost_deterministic(ordered, plan, seed=seed)


def test_check_cost_deterministic_shuffles_by_its_seed_alone_and_by_default_as_seed_0():
    def second_pair(tree, ctx):
        return float(list(ctx.relations)[1][1][1:])  # the right atom of the pair that happens to come second

    ordered = CostModel.parse("cost = depth + second", name="ordered", metrics={"second": second_pair})
    plan = optimize(PINNED, cost_model=ordered)

    def caught(**seed) -> bool:
        try:
            check_cost_deterministic(ordered, plan, **seed)
        except InvariantError:
            return True
        return False

    verdicts = {seed: caught(seed=seed) for seed in range(6)}
    assert not verdicts[0] and verdicts[1]  # seed 1's shuffle moves the second pair, seed 0's does not
    for seed, verdict in verdicts.items():  # a seed gives one verdict, every time
        assert [caught(seed=seed) for _ in range(10)] == [verdict] * 10
    assert [caught() for _ in range(10)] == [verdicts[0]] * 10


def test_check_cost_deterministic_rejects_a_plan_reporting_another_cost():
    plan = planned(SIBLINGS)
    wrong = attrs.evolve(plan, cost=attrs.evolve(plan.cost, total=plan.cost.total + 1))
    with pytest.raises(InvariantError, match=f"the plan reports cost {plan.cost.total + 1}, the model gives"):
        check_cost_deterministic(STRUCTURAL, wrong)
    assert check_cost_deterministic(STRUCTURAL, plan) == plan.cost.total


def test_check_cost_deterministic_gives_a_metric_the_query_and_the_embedder_and_allows_rounding():
    default = load_cost_model("default")  # similarity needs the embedder
    plan = optimize(SIBLINGS, cost_model=default, embedder=HashEmbedder())
    assert check_cost_deterministic(default, plan, embedder=HashEmbedder()) == plan.cost.total
    atoms = CostModel.parse(
        "cost = depth + atoms", name="atoms", metrics={"atoms": lambda t, ctx: len(ctx.query.atoms)}
    )
    zero = CostModel.parse("cost = depth - 2", name="zero")
    for model, total, slack in ((atoms, 5.0, 5e-9), (zero, 0.0, 1e-9)):  # the cost 5 and 0
        plan = optimize(SIBLINGS, cost_model=model)
        assert plan.cost.total == total
        for off in (slack / 2, slack if total == 0 else 0):  # exactly 1e-9 is representable at 0
            check_cost_deterministic(model, attrs.evolve(plan, cost=attrs.evolve(plan.cost, total=total + off)))
        with pytest.raises(
            InvariantError, match=re.escape(f"the plan reports cost {total + 1.5 * slack}, the model gives {total}")
        ):
            check_cost_deterministic(model, attrs.evolve(plan, cost=attrs.evolve(plan.cost, total=total + 1.5 * slack)))


def test_check_monotone_rejects_each_broken_declaration():
    @structural(leaves=1)
    def falls_with_leaves(shape: Shape) -> float:
        return -float(shape.leaves)

    @structural(size=1)
    def reads_height_too(shape: Shape) -> float:
        return float(shape.size + shape.height)

    def plain(tree, ctx) -> float:
        return 0.0

    shape = Shape(size=4, height=2, imbalance=1, edges=3, leaves=2)
    with pytest.raises(InvariantError, match="declares direction \\+1 in leaves but goes -2.0 -> -3.0"):
        check_monotone(falls_with_leaves, shape, "leaves")
    with pytest.raises(
        InvariantError, match="reads_height_too moves with height \\(6.0 -> 7.0\\) but does not declare it"
    ):
        check_monotone(reads_height_too, shape, "height")
    with pytest.raises(InvariantError, match="'plain' is not declared structural"):
        check_monotone(plain, shape, "size")
    with pytest.raises(
        InvariantError, match=re.escape("unknown field 'width' (fields: size, height, imbalance, edges, leaves)")
    ):
        check_monotone(reads_height_too, shape, "width")
    check_monotone(reads_height_too, shape, "size")  # the declared direction holds


class Unnamed:
    """A metric object with no ``__name__``."""

    def __init__(self, structure: Structure | None = None):
        self.structure = structure

    def __call__(self, tree, ctx) -> float:
        return 0.0

    def __repr__(self) -> str:
        return "Unnamed()"


def test_check_monotone_names_a_metric_object_without_a_name():
    shape = Shape(size=4, height=2, imbalance=1, edges=3, leaves=2)
    with pytest.raises(InvariantError, match=re.escape("Unnamed() is not declared structural")):
        check_monotone(Unnamed(), shape, "size")
    reads_height = Unnamed(Structure(lambda s: float(s.size + s.height), {"size": 1}))
    with pytest.raises(
        InvariantError, match=re.escape("metric moves with height (6.0 -> 7.0) but does not declare it")
    ):
        check_monotone(reads_height, shape, "height")
    with pytest.raises(InvariantError, match=re.escape("metric declares direction -1 in size but goes 6.0 -> 7.0")):
        check_monotone(Unnamed(Structure(lambda s: float(s.size + s.height), {"size": -1})), shape, "size")


def test_check_monotone_accepts_a_flat_or_negative_metric_moving_as_declared():
    @structural(leaves=1, size=-1)
    def capped_deficit(shape: Shape) -> float:
        return float(min(shape.leaves, 3) - shape.size)  # negative; flat in leaves past 3

    shape = Shape(size=10, height=2, imbalance=1, edges=9, leaves=5)
    for field in ("leaves", "size", "height"):  # -5 -> -5, -5 -> -6, no change
        check_monotone(capped_deficit, shape, field)
    check_monotone(capped_deficit, attrs.evolve(shape, leaves=1), "leaves")  # -9 -> -8
    check_monotone(capped_deficit, attrs.evolve(shape, leaves=2, size=3), "leaves")  # -1 -> 0


MIXED_TEXT = (
    "param w = 2\ncost = -depth + edges * w - max(size, 1) / 3 + log(size + 1) - abs(imbalance - 1.5) + min(depth, 0.5)"
)
MIXED = CostModel.parse(MIXED_TEXT, name="mixed")


def test_check_cost_formula_reads_every_construct_of_the_cost_language():
    plan = planned(SIBLINGS)  # depth 2, edges 4, size 3, imbalance 1
    expected = -2 + 4 * 2 - 3 / 3 + math.log(3 + 1) - abs(1 - 1.5) + min(2, 0.5)
    assert check_cost_formula(MIXED, plan) == pytest.approx(expected)


class OffByHalf(CostModel):
    """Adds 0.5 to what its formula gives: a broken evaluator."""

    def evaluate_values(self, values):
        return super().evaluate_values(values) + 0.5


class OffByARoundingError(CostModel):
    def evaluate_values(self, values):
        return super().evaluate_values(values) + 1e-12


class ParamsIgnored(CostModel):
    """Ignores parameter overrides (``--param w=5`` does nothing)."""

    def with_params(self, **params):
        return self


class Unreadable(CostModel):
    def formula(self) -> str:
        return "depth if edges else size"


def test_check_cost_formula_rejects_each_broken_cost_model():
    plan = planned(SIBLINGS)
    good, formula = check_cost_formula(MIXED, plan), MIXED.formula()
    with pytest.raises(InvariantError) as caught:
        check_cost_formula(OffByHalf.parse(MIXED_TEXT, name="mixed"), plan)
    assert str(caught.value) == f"cost model 'mixed' gives {good + 0.5}; its formula {formula} gives {good}"
    with pytest.raises(InvariantError) as caught:
        check_cost_formula(ParamsIgnored.parse(MIXED_TEXT, name="mixed"), plan)
    overridden = check_cost_formula(MIXED.with_params(w=3.5), plan)  # w + 1.5
    assert (
        str(caught.value)
        == f"cost model 'mixed' with {{'w': 3.5}} gives {good}; its formula {formula} gives {overridden}"
    )
    with pytest.raises(InvariantError, match=re.escape("cannot read IfExp(test=Name(id='edges'")):
        check_cost_formula(Unreadable.parse("cost = depth", name="unreadable"), plan)


def test_check_cost_formula_takes_a_rounding_error_near_zero():
    plan = planned(SIBLINGS)  # depth 2: the cost is 0, or 1e-12 from an evaluator that rounds differently
    assert check_cost_formula(OffByARoundingError.parse("cost = depth - 2", name="rounding"), plan) == 1e-12


def test_check_declarations_measures_each_structural_metric_of_a_model_at_the_plans_subtrees():
    from nlqo.testing import check_declarations
    from nlqo.testing.strategies import chain

    @structural(height=1)
    def short_sighted(shape: Shape) -> float:
        """Grows with the height up to 2, then falls: only a subtree of height 2 or more shows it."""
        return float(shape.height if shape.height < 3 else 0)

    def fan_out(tree, ctx) -> float:  # not declared structural: nothing to measure
        return float(len(tree.children.get(ROOT, ())))

    model = CostModel.parse(
        "cost = depth + short_sighted - fan_out", metrics={"short_sighted": short_sighted, "fan_out": fan_out}
    )
    shallow = optimize(chain(1), cost_model=STRUCTURAL)  # subtrees of heights 0 and 1: one step up shows nothing
    check_declarations(model, shallow, steps=(1,))
    check_declarations(STRUCTURAL, planned(PINNED))
    with pytest.raises(
        InvariantError, match=re.escape("declares direction +1 in height but goes 1.0 -> 0.0 when it grows by 2")
    ):
        check_declarations(model, shallow)
    with pytest.raises(
        InvariantError, match=re.escape("short_sighted declares direction +1 in height but goes 2.0 -> 0.0")
    ):
        check_declarations(model, optimize(chain(4), cost_model=STRUCTURAL), steps=(1,))

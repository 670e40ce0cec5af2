"""The DP's pruning is sound: a sub-plan it drops can never grow into a cheaper plan than the one
that dropped it. Checked on every shape of a few atoms, and on hand-built shapes where it takes more
atoms than the brute-force oracle can enumerate."""

import itertools
from functools import reduce

import pytest

from nlqo.cost.model import CostModel
from nlqo.cost.shape import LEAF, ROOT, Shape, attach, finished
from nlqo.optimizer.dp import Entry, Order, _insert, _split

MODELS = (
    "cost = imbalance",
    "cost = -imbalance",
    "cost = leaves",
    "cost = -leaves",
    "cost = depth - edges",
    "cost = abs(depth - 2) + imbalance - leaves",
)
ATOMS = 5


def shapes(atoms: int) -> tuple[dict[int, set[Shape]], dict[int, set[Shape]]]:
    """Every sub-plan shape of up to ``atoms`` atoms, partial (its root may still get children,
    under an atom or the question) and finished (as a child), by atom count; one or no sibling link."""
    under_atom: dict[int, set[Shape]] = {1: {LEAF}}
    under_question: dict[int, set[Shape]] = {0: {ROOT}}
    done: dict[int, set[Shape]] = {}
    for size in range(1, atoms + 1):
        for family in (under_atom, under_question):
            grown = family.setdefault(size, set())
            for smaller, parents in list(family.items()):
                for child in done.get(size - smaller, ()):
                    grown |= {attach(p, child, links) for p in parents for links in (0, 1)}
        done[size] = {finished(s) for s in under_atom[size]}
    partial = {size: under_atom.get(size, set()) | under_question.get(size, set()) for size in range(atoms + 1)}
    return partial, done


def dominates(a: Shape, b: Shape, dims: tuple[tuple[str, int], ...]) -> bool:
    """Whether the DP's frontier drops ``b`` once it holds ``a``."""
    frontier, _ = _insert([(*_split(a, dims), Entry(a, ()))], Entry(b, ()), dims, 8, lambda s: 0.0)
    return [entry.shape for *_, entry in frontier] == [a]


PARTIAL, DONE = shapes(ATOMS)


@pytest.mark.parametrize("formula", MODELS)
def test_a_dropped_sub_plan_never_grows_into_a_cheaper_plan(formula):
    model = CostModel.parse(formula)
    order = Order.of(model.directions())
    pairs = 0
    for size, group in PARTIAL.items():
        for kept, dropped in itertools.permutations(sorted(group, key=repr), 2):
            if not dominates(kept, dropped, order.partial):
                continue
            pairs += 1
            assert model.shape_cost(kept) <= model.shape_cost(dropped), (kept, dropped)  # as a complete plan
            assert dominates(finished(kept), finished(dropped), order.finished), (kept, dropped)  # as a child
            for child in (c for n, cs in DONE.items() if size + n <= ATOMS for c in cs):  # with one more child
                for links in (0, 1):
                    assert dominates(attach(kept, child, links), attach(dropped, child, links), order.partial)
    for size, group in DONE.items():  # a dropped child never makes its parent cheaper
        for kept, dropped in itertools.permutations(sorted(group, key=repr), 2):
            if dominates(kept, dropped, order.finished):
                pairs += 1
                for parent in (p for n, ps in PARTIAL.items() if n + size <= ATOMS for p in ps):
                    assert dominates(attach(parent, kept, 0), attach(parent, dropped, 0), order.partial)
    assert pairs > 20  # the check had something to check


def _tree(*children: Shape, root: Shape = LEAF) -> Shape:
    return reduce(lambda parent, child: attach(parent, child, 0), children, root)


def _chain(height: int) -> Shape:
    return finished(reduce(lambda below, _: _tree(below), range(height), LEAF))


def test_when_imbalance_costs_the_sub_plan_with_the_taller_shortest_child_is_kept():
    """Both sub-plans hang two children under the question, the tallest of height 3, with an
    imbalance of 2; a child of height 4 attached later spreads the heights under the question by 3
    over the one whose shortest child has height 1, by 2 over the other. Nine atoms: beyond the
    oracle, so the property above cannot reach it."""
    low = _tree(_chain(1), finished(_tree(_chain(2), LEAF, LEAF, LEAF)), root=ROOT)
    high = _tree(_chain(2), finished(_tree(LEAF, _chain(2), LEAF)), root=ROOT)
    assert (low.size, low.height, low.max_child, low.imbalance) == (
        high.size,
        high.height,
        high.max_child,
        high.imbalance,
    )
    assert (low.size, low.imbalance, low.min_child, high.min_child) == (9, 2, 1, 2)
    assert (attach(low, _chain(4), 0).imbalance, attach(high, _chain(4), 0).imbalance) == (3, 2)
    order = Order.of(CostModel.parse("cost = imbalance").directions())
    assert dominates(high, low, order.partial) and not dominates(low, high, order.partial)
    # rewarded imbalance: the other way round
    order = Order.of(CostModel.parse("cost = -imbalance").directions())
    assert dominates(low, high, order.partial) and not dominates(high, low, order.partial)

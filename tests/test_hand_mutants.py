"""Hand mutants for what mutmut cannot mutate (issue 53): it leaves decorated functions alone, so the
five built-in metrics' declared directions (``@structural(height=1)`` and the rest) and the properties
of the plan values were never mutated. Each mutant below is applied as the seeded bugs are
(tests/seeded_bugs.py: the function recompiled from changed source) and must be caught by the public
kit's sweep, by the check it names: a declaration that changes the corpus's plans by check_optimal
(the brute-force oracle finds the plan the pruning lost), one that does not by check_declarations,
which measures each declaration on the plans: the size's (the size is the same for every sub-plan the
search compares) and the edges' (no query of the corpus has two sub-plans that tie on all else and
differ in their sibling links). A mutant of a property that only reorders (``Query.ids`` reversed) is
not listed: plans are the same up to ties, so it is equivalent for the kit."""

from __future__ import annotations

import pytest

from nlqo.testing.sweep import sweep
from seeded_bugs import SeededBug, seeded

METRICS = "nlqo.optimizer.cost.metrics"
DECLARED = {"size": "size", "edges": "edges", "depth": "height", "imbalance": "imbalance", "leaves": "leaves"}
"""Each built-in structural metric and the field it declares (direction +1)."""
SWAPPED = {"size": "height", "edges": "leaves", "depth": "size", "imbalance": "height", "leaves": "edges"}
"""The field each metric's declaration names instead, in the swapped-field mutant."""


def _declaration(metric: str, name: str, what: str, declared: str, caught_by: str) -> SeededBug:
    field = DECLARED[metric]
    return SeededBug(f"{metric}: {name}", what, f"{METRICS}:{metric}", f"@structural({field}=1)", declared, caught_by)


# the check that catches each (the first in the sweep's order), measured
CAUGHT = {
    ("size", "sign flipped"): "check_declarations",
    ("size", "field swapped"): "check_declarations",
    ("size", "declaration emptied"): "check_declarations",
    ("edges", "sign flipped"): "check_declarations",
    ("edges", "field swapped"): "check_declarations",
    ("edges", "declaration emptied"): "check_declarations",
    ("depth", "sign flipped"): "check_optimal",
    ("depth", "field swapped"): "check_optimal",
    ("depth", "declaration emptied"): "check_optimal",
    ("imbalance", "sign flipped"): "check_optimal",
    ("imbalance", "field swapped"): "check_optimal",
    ("imbalance", "declaration emptied"): "check_optimal",
    ("leaves", "sign flipped"): "check_optimal",
    ("leaves", "field swapped"): "check_optimal",
    ("leaves", "declaration emptied"): "check_optimal",
}

DECLARATIONS = tuple(
    _declaration(metric, kind, what, declared, CAUGHT[(metric, kind)])
    for metric, field in DECLARED.items()
    for kind, what, declared in (
        ("sign flipped", f"declares that it falls as {field} grows", f"@structural({field}=-1)"),
        ("field swapped", f"declares {SWAPPED[metric]} instead of {field}", f"@structural({SWAPPED[metric]}=1)"),
        ("declaration emptied", "declares no field: a constant", "@structural()"),
    )
)

HAND_MUTANTS: tuple[SeededBug, ...] = (
    *DECLARATIONS,
    SeededBug(
        "depth: declared by the size, falls with it",
        "the issue's example: declared @structural(size=1), returns -2 * size + height",
        f"{METRICS}:depth",
        '@structural(height=1)\ndef depth(shape: Shape) -> float:\n    """Height of the tree in edges."""\n'
        "    return shape.height",
        '@structural(size=1)\ndef depth(shape: Shape) -> float:\n    """Height of the tree in edges."""\n'
        "    return -2 * shape.size + shape.height",
        "check_optimal",
    ),
    SeededBug(
        "JoinGraph.n one short",
        "the join graph's node count (a property) leaves out the last atom",
        "nlqo.optimizer.graph:JoinGraph.n",
        "return len(self.ids)",
        "return len(self.ids) - 1",
        "check_plan",
    ),
    SeededBug(
        "Tree.nodes without the question",
        "a tree's nodes (a property) leave out its root, the question's node",
        "nlqo.optimizer.plan:Tree.nodes",
        "return self.order",
        "return self.order[1:]",
        "check_differential",
    ),
    SeededBug(
        "CostModel.names keeps the parameters",
        "the metric names a cost model reads (a property) include its parameters",
        "nlqo.optimizer.cost.model:CostModel.names",
        "if n.name not in self.params",
        "if n.name",
        "check_cost_deterministic",
    ),
)
"""Every hand mutant, with the check of the sweep that catches it first."""


def test_every_built_in_structural_metric_has_its_declaration_mutated_three_ways():
    assert {b.function.rsplit(":", 1)[1] for b in DECLARATIONS} == set(DECLARED)
    assert len(DECLARATIONS) == 3 * len(DECLARED) and len({b.name for b in HAND_MUTANTS}) == len(HAND_MUTANTS)


@pytest.mark.parametrize("mutant", HAND_MUTANTS, ids=lambda b: b.name)
def test_the_kit_catches_each_hand_mutant(mutant):
    with seeded(mutant):
        caught = sweep(first_only=True)
    assert caught, f"no check of the kit catches {mutant.name!r}"
    assert caught[0].check == mutant.caught_by, caught[0]

"""The public kit catches every seeded optimizer bug of the catalogue, and finds nothing on the
engine as it is (issue 42: a kit never seen to find a bug may not be able to)."""

from __future__ import annotations

import re

import pytest

from nlqo.testing import bugs
from nlqo.testing.bugs import BUGS, catalogue_table, seeded, sweep

DOC = bugs.__file__.rsplit("/nlqo/", 1)[0] + "/docs/testing.md"


def test_the_kit_finds_nothing_on_the_engine_as_it_is():
    assert sweep() == []


@pytest.mark.parametrize("bug", BUGS, ids=lambda b: b.name)
def test_each_seeded_bug_is_caught_by_its_check(bug):
    with seeded(bug):
        caught = sweep(first_only=True)
    assert caught, f"no check of the kit catches {bug.name!r}"
    assert caught[0].check == bug.caught_by, caught[0]


def test_a_seeded_bug_is_gone_after_its_block():
    bug = next(b for b in BUGS if b.name == "cost sign flipped")
    from nlqo.optimizer.cost import CostModel

    model = CostModel.parse("cost = size - edges")
    with seeded(bug):
        assert model.evaluate_values({"size": 3, "edges": 1}) == 4
    assert model.evaluate_values({"size": 3, "edges": 1}) == 2


def test_a_bug_whose_text_is_not_in_its_function_is_refused():
    bad = bugs.SeededBug("typo", "-", "nlqo.optimizer.cost.expr:evaluate", "return a ** b", "return a", "check_plan")
    with pytest.raises(ValueError, match="occurs 0 times"):
        with seeded(bad):
            pass


def test_the_catalogue_has_a_dozen_named_bugs_and_the_docs_show_it():
    assert len(BUGS) >= 12 and len({b.name for b in BUGS}) == len(BUGS)
    text = open(DOC, encoding="utf-8").read()
    block = re.search(r"<!-- BEGIN seeded-bugs -->\n(.*?)\n<!-- END seeded-bugs -->", text, flags=re.S)
    assert block and block.group(1) == catalogue_table(), "run: python -m nlqo.testing.bugs"


CYCLE_GUARDS = (
    bugs.SeededBug(
        "disjoint", "-", "nlqo.optimizer.dp:search", "if m1 & m2:\n    continue", "if False:\n    continue", "-"
    ),
    bugs.SeededBug(
        "root",
        "-",
        "nlqo.optimizer.dp:search",
        "if m1 >> c & 1 or cm.bit_length() > c:",
        "if cm.bit_length() > c:",
        "-",
    ),
)


@pytest.mark.parametrize("guard", CYCLE_GUARDS, ids=lambda b: b.name)
def test_dropping_a_dp_cycle_guard_changes_no_plan(guard):
    """Why the catalogue has no "cycle check dropped" (docs/testing.md): either guard removed, plans stay the same."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from nlqo.testing.strategies import plan, queries

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(queries(max_atoms=6), st.integers(0, 3), st.sampled_from(bugs.MODELS))
    def same_plan(query, seed, model):
        before = plan(query, cost_model=model, seed=seed)
        with seeded(guard):
            after = plan(query, cost_model=model, seed=seed)
        assert (after.tree, after.cost) == (before.tree, before.cost)

    same_plan()

"""Tools for testing nlqo and what users build on it: cost rules, metrics, rewrite rules, backends.

* :mod:`nlqo.testing.strategies` - hypothesis strategies for IR queries (chains, stars,
  comparisons, pinned relations), structural cost models and plans. Needs ``hypothesis``
  (``pip install nlqo[testing]``); everything else here does not.
* :mod:`nlqo.testing.invariants` - checkers that raise :class:`InvariantError` with a message:
  :func:`check_plan` (a tree over the kept atoms, acyclic, allowed edges, pins respected, the
  answer at the root, every input atom accounted for), :func:`check_cost_deterministic`,
  :func:`check_monotone` and :func:`check_declarations` (every structural metric of a cost model
  moves as it declares, measured at a plan's subtrees).
* :mod:`nlqo.testing.oracle` - :func:`cheapest`, the brute-force optimum to compare a plan with.
* :mod:`nlqo.testing.fixtures` - :func:`check_rule_file`, the golden-fixture runner for rewrite rules.
* :mod:`nlqo.testing.fakes` - :class:`ScriptedLLM`, :class:`HashEmbedder`, :class:`KeywordRetriever`.
* :mod:`nlqo.testing.oracles` - metamorphic oracles (optimality, the cost formula, invariance,
  search monotonicity, the relation cache, merge checks); :mod:`nlqo.testing.world` - a fake world
  in which every plan of a question must give the same, true answer (differential runs).
* :mod:`nlqo.testing.sweep` - :func:`~nlqo.testing.sweep.sweep`, which runs the whole kit on a corpus
  of queries and cost models (yours, if you pass them); docs/testing.md shows which check catches
  which of the seeded bugs (tests/seeded_bugs.py, not shipped).
* :mod:`nlqo.testing.plan_score` - :func:`plan_score`, a plan against a gold decomposition
  (:class:`~nlqo.testing.gold.Gold`; :func:`~nlqo.testing.gold.load_gold` reads the shared sets' golds).

``docs/testing.md`` is a tutorial; its code runs as a test.

>>> from nlqo.testing import check_plan, cheapest
>>> from nlqo.optimizer.optimizer import optimize
>>> from nlqo.optimizer.cost import load_cost_model
>>> from nlqo.ir.syntax import parse
>>> plan = check_plan(optimize(parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?c)\\nanswer ?c'), cost_model=load_cost_model("structural")))
>>> cheapest(plan, load_cost_model("structural")).cost == plan.cost.total
True
"""

from nlqo.testing.fakes import PASSAGES, HashEmbedder, KeywordRetriever, ScriptedLLM
from nlqo.testing.fixtures import check_rule_file, rule_cases
from nlqo.testing.invariants import (
    InvariantError,
    check_cost_deterministic,
    check_cost_formula,
    check_declarations,
    check_monotone,
    check_plan,
)
from nlqo.testing.gold import Gold, GoldStep, load_gold
from nlqo.testing.oracle import all_trees, cheapest
from nlqo.testing.plan_score import PlanScore, gold_plan, plan_score

__all__ = [
    "PASSAGES",
    "Gold",
    "GoldStep",
    "HashEmbedder",
    "InvariantError",
    "KeywordRetriever",
    "PlanScore",
    "ScriptedLLM",
    "all_trees",
    "check_cost_deterministic",
    "check_cost_formula",
    "check_declarations",
    "check_monotone",
    "check_plan",
    "check_rule_file",
    "cheapest",
    "gold_plan",
    "load_gold",
    "plan_score",
    "rule_cases",
]

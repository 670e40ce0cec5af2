"""TREE: PlanRAG's parallel tree, bottom-up over the logical plan, independent nodes of a wave at once."""

from __future__ import annotations

import attrs

from nlqo.planner.lower import estimate_tree
from nlqo.kinds import Operator


@attrs.frozen
class Tree:
    name: Operator = Operator.TREE
    label: str = "ParallelTree (PlanRAG)"
    needs_plan: bool = True

    def estimate(self, plan, profile, k):
        return estimate_tree(plan, profile, k)

    def run(self, engine, question, physical, trace, strategy):
        return engine.tree.run(physical.logical, trace=trace, strategy=strategy)

    def annotate(self, physical):
        return {n: f"ParallelTree wave {wave}" for wave, nodes in enumerate(physical.waves, 1) for n in nodes}


TREE = Tree()

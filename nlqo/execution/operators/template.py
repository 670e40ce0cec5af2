"""TEMPLATE: the TSSS linear template. On a parsed plan its atoms are shown as hints (or, with
``plan_steps``, are the hops' questions); on a question that was not parsed it runs alone."""

from __future__ import annotations

import attrs

from nlqo.planner.lower import estimate_linear
from nlqo.kinds import Operator
from nlqo.optimizer.plan import ROOT


@attrs.frozen
class Template:
    name: Operator = Operator.LINEAR
    label: str = "LinearTemplate (TSSS)"
    needs_plan: bool = False

    def estimate(self, plan, profile, k):
        return estimate_linear(plan, profile, k)

    def run(self, engine, question, physical, trace, strategy):
        if not physical.parsed:
            return engine.linear.run(question, trace=trace, strategy=strategy)
        if engine.config.plan_steps:
            return engine.linear.run(question, steps=physical.hints, trace=trace, strategy=strategy)
        hints = physical.hints if engine.config.plan_hints else ()
        return engine.linear.run(question, hints=hints, trace=trace, strategy=strategy)

    def annotate(self, physical):
        if not physical.parsed:
            return {
                n: "LinearTemplate: the question alone, no plan hints" if n == ROOT else ""
                for n in physical.logical.tree.nodes
            }
        order = [n for n in physical.logical.tree.postorder() if n != ROOT]
        out = {n: f"LinearTemplate hop {i} hint" for i, n in enumerate(order, 1)}
        out[ROOT] = "LinearTemplate final answer"
        return out


TEMPLATE = Template()

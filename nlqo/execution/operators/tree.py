"""TREE: PlanRAG's parallel tree, bottom-up over the logical plan, independent nodes of a wave at once."""

from __future__ import annotations

import attrs

from nlqo.execution.physical import PASSAGE_TOKENS, BackendProfile, Estimate
from nlqo.execution.tree import TreeExecutor
from nlqo.kinds import Operator
from nlqo.optimizer.plan import Plan


def estimate_tree(plan: Plan, profile: BackendProfile, k: int) -> Estimate:
    node_prompt = 250 + (k * PASSAGE_TOKENS + 120)
    node_generated = 15 + 8
    node_ms = (
        node_prompt * profile.prefill_ms_per_token + node_generated * profile.decode_ms_per_token + profile.retrieve_ms
    )
    ms = sum(profile.wave_ms(len(wave), node_ms) for wave in plan.tree.levels())
    n = len(plan.tree.nodes)
    return Estimate(
        ms=ms, llm_calls=2 * n - 1, generated_tokens=n * node_generated, computed_prompt_tokens=n * node_prompt
    )


def executor(context) -> TreeExecutor:
    """The context's tree executor, made once."""
    config = context.config

    def make() -> TreeExecutor:
        return TreeExecutor(
            context.llm,
            context.retriever,
            k=config.k,
            workers=config.workers,
            parallel=config.parallel,
            guard_rewrites=config.guard_rewrites,
            queries=config.tree_queries,
        )

    return context.state(Operator.TREE, make)


@attrs.frozen
class Tree:
    name: Operator = Operator.TREE
    label: str = "ParallelTree (PlanRAG)"
    needs_plan: bool = True

    def candidate(self, shape, simple):
        return True

    def estimate(self, plan, profile, k):
        return estimate_tree(plan, profile, k)

    def run(self, context, question, physical, trace, strategy):
        return executor(context).run(physical.logical, trace=trace, strategy=strategy)

    def annotate(self, physical):
        return {n: f"ParallelTree wave {wave}" for wave, nodes in enumerate(physical.waves, 1) for n in nodes}


TREE = Tree()

"""TEMPLATE: the TSSS linear template. On a parsed plan its atoms are shown as hints (or, with
``plan_steps``, are the hops' questions); on a question that was not parsed it runs alone."""

from __future__ import annotations

import attrs

from nlqo.execution.linear import LinearExecutor
from nlqo.execution.physical import PASSAGE_TOKENS, BackendProfile, Estimate
from nlqo.kinds import Operator
from nlqo.optimizer.plan import ROOT, Plan
from nlqo.runtime.prompts.execution import LINEAR, LINEAR_QUESTION_FIRST


def estimate_linear(plan: Plan, profile: BackendProfile, k: int) -> Estimate:
    hops = max(1, len(plan.tree.nodes) - 1)
    per_hop_prompt = k * PASSAGE_TOKENS + 60
    generated = hops * (15 + 25) + 15 + 8
    computed = hops * per_hop_prompt + 40
    if not profile.kv_reuse:  # every generation re-reads the whole text, prefix included
        calls_context = sum(700 + h * per_hop_prompt for h in range(hops + 1))
        computed = 2 * calls_context
    ms = computed * profile.prefill_ms_per_token + generated * profile.decode_ms_per_token + hops * profile.retrieve_ms
    return Estimate(ms=ms, llm_calls=2 * hops + 2, generated_tokens=generated, computed_prompt_tokens=computed)


def executor(context) -> LinearExecutor:
    """The context's template executor, made once: it keeps the scaffold's prefilled KV state across questions."""
    config = context.config

    def make() -> LinearExecutor:
        return LinearExecutor(
            context.llm,
            context.retriever,
            context.embedder,
            k=config.k,
            tau=config.tau,
            max_hops=config.max_hops,
            kv_reuse=config.kv_reuse,
            template=LINEAR_QUESTION_FIRST if config.question_first else LINEAR,
        )

    return context.state(Operator.LINEAR, make)


@attrs.frozen
class Template:
    name: Operator = Operator.LINEAR
    label: str = "LinearTemplate (TSSS)"
    needs_plan: bool = False

    def candidate(self, shape, simple):
        return True

    def estimate(self, plan, profile, k):
        return estimate_linear(plan, profile, k)

    def run(self, context, question, physical, trace, strategy):
        linear = executor(context)
        if physical is None or not physical.parsed:
            return linear.run(question, trace=trace, strategy=strategy)
        if context.config.plan_steps:
            return linear.run(question, steps=physical.hints, trace=trace, strategy=strategy)
        hints = physical.hints if context.config.plan_hints else ()
        return linear.run(question, hints=hints, trace=trace, strategy=strategy)

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

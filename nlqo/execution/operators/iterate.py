"""ITERATE: rounds of retrieval and generation (iter-retgen). Round 1 retrieves with the question,
each later round with the question and the previous round's generation; each round answers from
its own passages with the standard-rag prompt, and the last round's answer is the answer. The same
prompts and calls as the ``iter-retgen`` baseline, so the two give the same answers."""

from __future__ import annotations

import time

import attrs

from nlqo.execution.answers import short_answer
from nlqo.execution.physical import PASSAGE_TOKENS, BackendProfile, Estimate
from nlqo.execution.trace import RunResult, Trace
from nlqo.kinds import Operator, StopReason
from nlqo.execution.operators.base import at_root
from nlqo.runtime.prompts.baselines import DOCS, STANDARD_RAG
from nlqo.execution.calls import chat, refs, retrieve, stop

ROUNDS = 3
"""Rounds of retrieval and generation (iter-retgen's three)."""


@attrs.frozen
class Rounds:
    """What the rounds so far generated: each round's answer, and the last round's text and passages."""

    answers: tuple[str, ...] = ()
    text: str = ""
    hits: tuple = ()


def estimate_rounds(profile: BackendProfile, k: int, rounds: int) -> Estimate:
    """``rounds`` retrievals, each followed by one short answer over its passages."""
    computed = k * PASSAGE_TOKENS + 120
    generated = 8
    ms = computed * profile.prefill_ms_per_token + generated * profile.decode_ms_per_token + profile.retrieve_ms
    return Estimate(
        ms=rounds * ms, llm_calls=rounds, generated_tokens=rounds * generated, computed_prompt_tokens=rounds * computed
    )


def more_rounds(context, question: str, trace: Trace, done: Rounds = Rounds(), *, rounds: int = ROUNDS) -> Rounds:
    """Run rounds ``len(done.answers) + 1`` to ``rounds``, continuing from ``done``."""
    answers, text, hits = list(done.answers), done.text, done.hits
    for r in range(len(answers) + 1, rounds + 1):
        query = question if r == 1 else f"{question} {text}"
        hits = tuple(retrieve(context.retriever, query, context.k, trace, f"round-{r}"))
        text = chat(context.llm, STANDARD_RAG, trace, f"round-{r}", reference=DOCS.render(hits), question=question)
        answers.append(short_answer(text, question))
    return Rounds(tuple(answers), text, hits)


def result(question: str, done: Rounds, trace: Trace, strategy: str, started: float, reason: str) -> RunResult:
    return RunResult(
        question=question,
        answer=done.answers[-1] if done.answers else "",
        strategy=strategy,
        supporting=refs(done.hits),
        trace=trace.freeze(),
        stop_reason=reason,
        hops=len(done.answers),
        execution_ms=(time.perf_counter() - started) * 1000,
    )


@attrs.frozen
class Iterate:
    name: Operator = Operator.ITERATE
    label: str = "Iterate (iter-retgen)"
    needs_plan: bool = False

    def candidate(self, shape, simple):
        return False

    def estimate(self, plan, profile, k):
        return estimate_rounds(profile, k, ROUNDS)

    def run(self, context, question, physical, trace, strategy):
        started = time.perf_counter()
        done = more_rounds(context, question, trace)
        reason = stop(trace, f"round-{ROUNDS}", StopReason.MAX_ROUNDS)
        return result(question, done, trace, strategy, started, reason)

    def annotate(self, physical):
        return at_root(physical, f"Iterate: {ROUNDS} rounds of retrieval and generation")


ITERATE = Iterate()

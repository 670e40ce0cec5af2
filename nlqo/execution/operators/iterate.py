"""ITERATE: rounds of retrieval and generation (iter-retgen). Round 1 retrieves with the question,
each later round with the question and the previous round's generation; each round answers from
its own passages with the standard-rag prompt, and the last round's answer is the answer. The same
prompts and calls as the ``iter-retgen`` baseline, so the two give the same answers.

With ``stable`` (the ``stable_rounds`` setting), a round lists the passages the round before also
had first, in that round's order, then its new ones by rank: the prompt extends the KV prefix the
last round left cached. A round that retrieves the same passages as the one before then has the
same prompt, so it and every later round would repeat that round's answer (each later query is
the same): the rounds stop there, at a fixed point, and the skipped rounds count that answer."""

from __future__ import annotations

import time
from typing import Sequence

import attrs

from nlqo.common.passages import Hit
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
    repeated: int = 0
    """Rounds not run because they would repeat the last one (``stable`` only): counted in ``answers``."""


def estimate_rounds(profile: BackendProfile, k: int, rounds: int) -> Estimate:
    """``rounds`` retrievals, each followed by one short answer over its passages."""
    computed = k * PASSAGE_TOKENS + 120
    generated = 8
    ms = computed * profile.prefill_ms_per_token + generated * profile.decode_ms_per_token + profile.retrieve_ms
    return Estimate(
        ms=rounds * ms, llm_calls=rounds, generated_tokens=rounds * generated, computed_prompt_tokens=rounds * computed
    )


def more_rounds(
    context, question: str, trace: Trace, done: Rounds = Rounds(), *, rounds: int = ROUNDS, stable: bool = False
) -> Rounds:
    """Run rounds ``len(done.answers) + 1`` to ``rounds``, continuing from ``done``."""
    answers, text, hits = list(done.answers), done.text, done.hits
    for r in range(len(answers) + 1, rounds + 1):
        query = question if r == 1 else f"{question} {text}"
        found = tuple(retrieve(context.retriever, query, context.k, trace, f"round-{r}"))
        if stable and r > 1 and {h.passage.id for h in found} == {h.passage.id for h in hits}:
            stop(trace, f"round-{r}", StopReason.FIXED_POINT)
            return Rounds((*answers, *[answers[-1]] * (rounds - r + 1)), text, hits, rounds - r + 1)
        hits = in_stable_order(found, hits) if stable else found
        text = chat(context.llm, STANDARD_RAG, trace, f"round-{r}", reference=DOCS.render(hits), question=question)
        answers.append(short_answer(text, question))
    return Rounds(tuple(answers), text, hits)


def in_stable_order(hits: Sequence[Hit], before: Sequence[Hit]) -> tuple[Hit, ...]:
    """``hits`` with those ``before`` also had first, in ``before``'s order, then the rest by rank.

    >>> from nlqo.common.passages import Passage
    >>> a, b, c, d = (Hit(Passage(i, i, ""), 1.0, 1) for i in "abcd")
    >>> [h.passage.id for h in in_stable_order([c, d, a], [a, b, c])]
    ['a', 'c', 'd']
    """
    now = {h.passage.id: h for h in hits}
    kept = [now[h.passage.id] for h in before if h.passage.id in now]
    return (*kept, *(h for h in hits if h not in kept))


def result(question: str, done: Rounds, trace: Trace, strategy: str, started: float, reason: str) -> RunResult:
    return RunResult(
        question=question,
        answer=done.answers[-1] if done.answers else "",
        strategy=strategy,
        supporting=refs(done.hits),
        trace=trace.freeze(),
        stop_reason=reason,
        hops=len(done.answers) - done.repeated,
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
        done = more_rounds(context, question, trace, stable=context.config.stable_rounds)
        reason = StopReason.FIXED_POINT if done.repeated else stop(trace, f"round-{ROUNDS}", StopReason.MAX_ROUNDS)
        return result(question, done, trace, strategy, started, reason)

    def annotate(self, physical):
        return at_root(physical, f"Iterate: {ROUNDS} rounds of retrieval and generation")


ITERATE = Iterate()

"""The baseline strategies nlqo is measured against, following FlashRAG's pipelines.

Each is a service over an ``LLM`` and a ``Retriever`` with ``run(question, trace=None) ->
RunResult``. ``hops`` counts retrievals; ``stop_reason`` is ``answer`` (the model gave its answer),
``max_rounds`` (the round cap was reached) or ``empty`` (the model generated nothing to continue).
Deliberate differences from FlashRAG are named in each class.
"""

from __future__ import annotations

import re
import time
from typing import Any, ClassVar

import attrs

from nlqo.config import default
from nlqo.execution.operators.iterate import ROUNDS, more_rounds
from nlqo.execution.trace import RunResult, Trace
from nlqo.kinds import StopReason
from nlqo.runtime.llm.base import LLM
from nlqo.common.passages import Hit, Retriever
from nlqo.runtime.prompts.baselines import (
    CONTEXTS,
    DOCS,
    FOLLOW_UP,
    INTERMEDIATE,
    IRCOT,
    IRCOT_ANSWER_MARK,
    NO_RAG,
    SELF_ASK,
    SELF_ASK_ANSWER_MARK,
    STANDARD_RAG,
    WIKI,
)
from nlqo.execution.answers import short_answer
from nlqo.execution.calls import chat, complete, refs, retrieve, stop


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, not {value}")


def _result(baseline: Any, question: str, text: str, trace: Trace, started: float, **fields) -> RunResult:
    """The result of a baseline whose final text is ``text`` (through ``short_answer``, as every strategy's)."""
    return RunResult(
        question=question,
        answer=short_answer(text, question),
        strategy=baseline.name,
        trace=trace.freeze(),
        execution_ms=(time.perf_counter() - started) * 1000,
        **fields,
    )


@attrs.define(eq=False)
class NoRag:
    """Answer from the model's own knowledge, one call (FlashRAG ``SequentialPipeline.naive_run``)."""

    name: ClassVar[str] = "no-rag"
    llm: LLM
    retriever: Retriever | None = None
    """Unused; accepted so every baseline is built alike."""
    k: int = attrs.field(default=default("k"), validator=_positive)

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        trace, started = Trace() if trace is None else trace, time.perf_counter()
        text = chat(self.llm, NO_RAG, trace, "answer", question=question)
        reason = stop(trace, "answer", StopReason.ANSWER)
        return _result(self, question, text, trace, started, stop_reason=reason)


@attrs.define(eq=False)
class _Retrieving:
    """What a baseline that retrieves is built from."""

    llm: LLM
    retriever: Retriever
    k: int = attrs.field(default=default("k"), validator=_positive)


@attrs.define(eq=False)
class StandardRag(_Retrieving):
    """Retrieve the top ``k`` for the question once, then answer (FlashRAG ``SequentialPipeline``)."""

    name: ClassVar[str] = "standard-rag"

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        trace, started = Trace() if trace is None else trace, time.perf_counter()
        hits = retrieve(self.retriever, question, self.k, trace, "round-1")
        text = chat(self.llm, STANDARD_RAG, trace, "round-1", reference=DOCS.render(hits), question=question)
        reason = stop(trace, "round-1", StopReason.ANSWER)
        return _result(self, question, text, trace, started, supporting=refs(hits), stop_reason=reason, hops=1)


@attrs.define(eq=False)
class IterRetGen(_Retrieving):
    """``rounds`` of retrieval and generation (FlashRAG ``IterativePipeline``, ``iter_num=3``).

    Round 1 retrieves with the question; each later round with the question followed by the
    previous round's whole generation. Every round answers from its own passages with the
    standard-rag prompt; the last generation is the answer.
    """

    name: ClassVar[str] = "iter-retgen"
    rounds: int = attrs.field(default=ROUNDS, validator=_positive)

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        trace, started = Trace() if trace is None else trace, time.perf_counter()
        done = more_rounds(self, question, trace, rounds=self.rounds)  # the ITERATE operator's rounds
        reason = stop(trace, f"round-{self.rounds}", StopReason.MAX_ROUNDS)
        hits = refs(done.hits)
        return _result(self, question, done.text, trace, started, supporting=hits, stop_reason=reason, hops=self.rounds)


@attrs.define(eq=False)
class IRCoT(_Retrieving):
    """Interleave one chain-of-thought sentence with retrieval on it (FlashRAG ``IRCOTPipeline``, ``max_iter=5``).

    Round 1 retrieves with the question; each later round retrieves with the previous thought and
    pools the passages (best score per passage, listed in ascending score as FlashRAG does, so the
    strongest passage sits next to the question). Each round generates one sentence; the run stops
    when a thought contains "So the answer is:" or after ``max_rounds`` thoughts. The answer is the
    text after that marker, else (as in FlashRAG) all thoughts, through ``short_answer`` as for
    every strategy. Differences: thoughts are fed back
    with their period (FlashRAG drops it at the stop string), and no retrieval follows the last
    permitted thought, since nothing would read it.
    """

    name: ClassVar[str] = "ircot"
    max_rounds: int = attrs.field(default=5, validator=_positive)

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        trace, started = Trace() if trace is None else trace, time.perf_counter()
        pool: dict[str, Hit] = {}
        thoughts: list[str] = []
        context: list[Hit] = []
        reason, hops, node = StopReason.MAX_ROUNDS, 0, "round-1"
        for r in range(1, self.max_rounds + 1):
            node = f"round-{r}"
            hits = retrieve(self.retriever, thoughts[-1] if thoughts else question, self.k, trace, node)
            hops += 1
            for hit in hits:
                if hit.passage.id not in pool or hit.score > pool[hit.passage.id].score:
                    pool[hit.passage.id] = hit
            context = hits if r == 1 else sorted(pool.values(), key=lambda h: h.score)
            thought = complete(
                self.llm,
                IRCOT,
                trace,
                node,
                reference=WIKI.render(context),
                question=question,
                thoughts=_scratchpad(thoughts),
            ).strip()
            if not thought:
                reason = StopReason.EMPTY
                break
            thoughts.append(thought)
            if IRCOT_ANSWER_MARK in thought:
                reason = StopReason.ANSWER
                break
        stop(trace, node, reason)
        chain = " ".join(thoughts)
        text = chain.split(IRCOT_ANSWER_MARK, 1)[1] if IRCOT_ANSWER_MARK in chain else chain
        best_first = refs(sorted(pool.values(), key=lambda h: -h.score))
        return _result(self, question, text, trace, started, supporting=best_first, stop_reason=reason, hops=hops)


def _scratchpad(thoughts: list[str]) -> str:
    """Earlier thoughts as they follow ``Thought:``, each ending in punctuation.

    >>> _scratchpad([]), _scratchpad(["A is in Peru", "B is in Chile."])
    ('', ' A is in Peru. B is in Chile.')
    """
    if not thoughts:
        return ""
    return " " + " ".join(t if t.endswith((".", "!", "?")) else t + "." for t in thoughts)


@attrs.define(eq=False)
class SelfAsk(_Retrieving):
    """Self-ask with retrieval (FlashRAG ``SelfAskPipeline``, multi-hop prompt, ``max_iter=5``).

    Retrieval starts with the question. Each round is one generation continuing the scratchpad:
    the model either writes a "Follow up:" question (stopped before it writes the "Intermediate
    answer:" itself) or, from the passages retrieved for that follow-up, the intermediate answer
    (stopped before the next "Follow up:"). Each follow-up question is the next retrieval query.
    The run stops when "So the final answer is:" appears or after ``max_rounds`` generations; the
    answer is the text after that marker, else empty (as in FlashRAG). Differences: passages are
    listed with their title (as the demonstrations show them), and no retrieval follows the last
    permitted round.
    """

    name: ClassVar[str] = "self-ask"
    max_rounds: int = attrs.field(default=5, validator=_positive)

    def run(self, question: str, trace: Trace | None = None) -> RunResult:
        trace, started = Trace() if trace is None else trace, time.perf_counter()
        hits = retrieve(self.retriever, question, self.k, trace, "round-1")
        hops, scratch, expect, reason, r = 1, "", INTERMEDIATE, StopReason.MAX_ROUNDS, 1
        for r in range(1, self.max_rounds + 1):
            text = complete(
                self.llm, SELF_ASK, trace, f"round-{r}", stop=(expect,),
                reference=CONTEXTS.render(hits), question=question, scratchpad=scratch,
            )  # fmt: skip
            scratch += text if expect == INTERMEDIATE else _through_follow_up(text)
            expect = FOLLOW_UP if expect == INTERMEDIATE else INTERMEDIATE
            if not scratch:
                reason = StopReason.EMPTY
                break
            scratch = scratch.removesuffix("\n")
            if SELF_ASK_ANSWER_MARK in text:
                reason = StopReason.ANSWER
                break
            follow_up = _follow_up(text)
            if follow_up and r < self.max_rounds:
                hits = retrieve(self.retriever, follow_up, self.k, trace, f"round-{r + 1}")
                hops += 1
        stop(trace, f"round-{r}", reason)
        return _result(
            self, question, final_answer(scratch), trace, started, supporting=refs(hits), stop_reason=reason, hops=hops
        )


_FOLLOW_UP_LINE = re.compile(re.escape(FOLLOW_UP) + r".*\n")


def _through_follow_up(text: str) -> str:
    """``text`` up to and including its first complete follow-up line.

    >>> _through_follow_up("\\nIntermediate answer: X.\\nFollow up: Y?\\nZ")
    '\\nIntermediate answer: X.\\nFollow up: Y?\\n'
    >>> _through_follow_up("\\nIntermediate answer: X.")
    '\\nIntermediate answer: X.'
    """
    match = _FOLLOW_UP_LINE.search(text)
    return text if match is None else text[: match.end()]


def _follow_up(text: str) -> str:
    """The first follow-up question in ``text``, or ''.

    >>> _follow_up("Follow up: Who wrote Frankenstein?\\n")
    'Who wrote Frankenstein?'
    """
    for line in text.splitlines():
        if FOLLOW_UP in line:
            return line.split(FOLLOW_UP, 1)[1].strip()
    return ""


def final_answer(scratchpad: str) -> str:
    """The text after "So the final answer is:" on its line, or '' when there is none.

    >>> final_answer("Follow up: X?\\nIntermediate answer: Y.\\nSo the final answer is: Moby-Dick.")
    'Moby-Dick'
    >>> final_answer("Follow up: X?")
    ''
    """
    for line in scratchpad.splitlines():
        if SELF_ASK_ANSWER_MARK in line:
            return line.split(SELF_ASK_ANSWER_MARK, 1)[1].strip().rstrip(".").strip()
    return ""


BASELINES: dict[str, type] = {cls.name: cls for cls in (NoRag, StandardRag, IterRetGen, IRCoT, SelfAsk)}
"""The baseline classes by strategy name, in the order reports list them."""

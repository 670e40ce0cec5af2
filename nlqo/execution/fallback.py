"""The answer of last resort: a strategy that ends with an empty answer, or with a prompt
demonstration's answer that none of its passages holds (copied from the prompt, not read:
:func:`nlqo.eval.leaks.demo_leak`), asks once more, for a short span of the passages it retrieved;
when that is empty too, the result says "no answer" explicitly (``stop_reason`` ends in
``no_answer``, EXPLAIN and the JSON show it) instead of an empty string.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from nlqo.execution.answers import short_answer
from nlqo.config import default
from nlqo.execution.leaks import demo_leak, passage_texts
from nlqo.execution.trace import PassageRef, RunResult, Step, Trace
from nlqo.kinds import StopReason, stop_reasons
from nlqo.runtime.llm.base import LLM
from nlqo.runtime.llm.constrain import Constraint, constrained_chat, trie_choice
from nlqo.common.passages import Passage
from nlqo.runtime.prompts import execution

NO_ANSWER: str = StopReason.NO_ANSWER.value
"""The ``stop_reason`` suffix of a run that found no answer."""
FALLBACK_NODE = "fallback"
MAX_SPAN_WORDS = 6
"""Longest run of passage words the fallback may give as the answer."""


def spans(texts: Sequence[str], max_words: int = MAX_SPAN_WORDS) -> list[str]:
    """Every run of at most ``max_words`` words of ``texts`` (outer punctuation stripped), then
    ``yes`` and ``no``: the answers a fallback may give.

    >>> spans(["Jaws, by Spielberg."], max_words=2)
    ['Jaws', 'Jaws, by', 'by', 'by Spielberg', 'Spielberg', 'yes', 'no']
    """
    out: dict[str, None] = {}
    for text in texts:
        words = text.split()
        for i in range(len(words)):
            for n in range(1, max_words + 1):
                if i + n <= len(words):
                    span = " ".join(words[i : i + n]).strip(".,;:!?()[]\"'").strip()
                    if span:
                        out.setdefault(span)
    for word in ("yes", "no"):
        out.setdefault(word)
    return list(out)


def span_constraint(texts: Sequence[str], max_words: int = MAX_SPAN_WORDS) -> Constraint:
    """A reply that is one span of ``texts`` (:func:`spans`); a trie, as three passages give
    thousands of spans (:func:`~nlqo.runtime.llm.constrain.trie_choice`)."""
    return trie_choice(spans(texts, max_words), name="passage-span")


def ask_again(
    llm: LLM, question: str, refs: Sequence[PassageRef], constraint: Constraint, trace: Trace, node: str, note: str
) -> str:
    """``question`` asked once more with the tree's answer prompt over ``refs``, the reply under
    ``constraint`` where the backend applies one; the call is recorded as ``node``."""
    prompt = execution.ANSWER
    passages = [Passage(id=r.id, title=r.title, text=r.text) for r in refs]
    messages = prompt.messages(passages=execution.LINEAR.render_passages(passages), known="", question=question)
    at = trace.now_ms()
    out = constrained_chat(llm, messages, constraint, stop=prompt.stop, max_tokens=prompt.max_tokens)
    trace.record(Step.llm(node, out.usage, out.text, at, prompt=messages, note=note, confidence=out.confidence))
    return short_answer(out.text, question)


def best_passages(result: RunResult, k: int) -> list[PassageRef]:
    """The best ``k`` distinct passages the run retrieved, with their texts."""
    return sorted(result.distinct_retrieved(), key=lambda r: -r.score)[:k]


def answer_or_fallback(result: RunResult, llm: LLM, *, k: int = default("k"), trace: Trace | None = None) -> RunResult:
    """``result`` itself when it has an answer that is not a demonstration's copied from the prompt;
    else the answer to one more call, constrained (where the backend can) to a span of the retrieved
    passages; else ``result`` marked :data:`NO_ANSWER`."""
    texts = passage_texts(result)
    copied = demo_leak(result.answer, texts)
    if result.answer.strip() and not copied:
        return result
    trace = trace or Trace(list(result.trace))
    refs = best_passages(result, k)
    answer = ""
    if refs:
        why = (
            f"the strategy's answer {result.answer!r} is a prompt demonstration's, in none of its passages"
            if copied
            else "the strategy's answer was empty"
        )
        answer = ask_again(
            llm,
            result.question,
            refs,
            span_constraint([r.text for r in refs]),
            trace,
            FALLBACK_NODE,
            f"{why}: asked for a span of its passages",
        )
        if demo_leak(answer, texts):  # a backend that cannot constrain the reply copied it again
            answer = ""
    reason = stop_reasons(result.stop_reason, StopReason.FALLBACK_ANSWER if answer else NO_ANSWER)
    return attrs.evolve(result, answer=answer, trace=trace.freeze(), stop_reason=reason)

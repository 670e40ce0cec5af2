"""A choice question's answer is one of the options it names.

"Which film came out first, Jaws or Alien?" is answered ``Jaws`` or ``Alien``; small models often
answer the bridge entity (the director) or the value compared (a year) instead. When a run's answer
names no option, or both, the engine asks once more, constrained (where the backend can) to the
options, over the passages the run retrieved. Two forms are recognised: ``<wh-word> ..., A or B?``
(the comma bounds the options; it is how the multi-hop data sets ask), and a polar question
(``Are both films American?``: an auxiliary verb first, no ``or`` and no ``which``, ``what``,
``who`` or ``how``, so ``Will Smith starred in which film?`` is not one), whose options are yes and no.

Before asking again, the run's own text is read: an answer that is the bridge entity or the value
(``Carl Boese`` for "Which film has the director who died earlier, Payment On Demand or My Cousin
From Warsaw?") is usually named, in one node or hop, together with the option it belongs to (``the
film My Cousin from Warsaw was directed by Carl Boese.``); when exactly one option is so linked,
it is the answer, without another call (:func:`linked_options`).
"""

from __future__ import annotations

import re
from typing import Sequence

import attrs

from nlqo.execution.fallback import ask_again
from nlqo.execution.trace import RunResult, Step, Trace
from nlqo.kinds import StepKind, StopReason, stop_reasons
from nlqo.parser.questions import YES_NO, offered_options
from nlqo.runtime.llm.base import LLM
from nlqo.runtime.llm.constrain import choice

CHOICE_NODE = "choice"
HELD: str = StopReason.HELD_TO_OPTIONS.value
"""The ``stop_reason`` suffix of a run whose answer was asked again among the options."""
MAX_PASSAGES = 8
"""Passages shown when a choice question is asked again among its options."""


def _words(text: str) -> set[str]:
    """The words of ``text`` that identify it (lower case, initials left out)."""
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 1}


def named_options(answer: str, options: Sequence[str]) -> list[str]:
    """The options ``answer`` names: it has every word of the option (initials aside), or all its
    words are the option's.

    >>> named_options("Jaws (film)", ["Jaws", "Alien"]), named_options("1975", ["Jaws", "Alien"])
    (['Jaws'], [])
    >>> named_options("Joseph Leo Mankiewicz", ["Joseph L. Mankiewicz", "Tony Kaye"])
    ['Joseph L. Mankiewicz']
    """
    said = _words(answer)
    if not said:
        return []
    return [o for o in options if (w := _words(o)) and (w <= said or said <= w)]


def node_texts(steps: Sequence[Step]) -> list[str]:
    """What a run wrote and searched, one text per node or hop (its questions, queries and
    answers joined); the parse, relation and choice steps left out, as they restate the question."""
    texts: dict[str, list[str]] = {}
    for step in steps:
        if step.kind != StepKind.STOP and step.text and step.node not in ("parse", "relations", CHOICE_NODE):
            texts.setdefault(step.node, []).append(step.text)
    return [" ".join(parts) for parts in texts.values()]


def linked_options(answer: str, options: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The options that some text names together with every word of ``answer``.

    >>> texts = ["Who directed Payment On Demand? Payment on Demand was directed by Curtis Bernhardt.",
    ...          "Who directed My Cousin From Warsaw? the film My Cousin from Warsaw was directed by Carl Boese.",
    ...          "Who died earlier? Carl Boese died on July 6, 1958."]
    >>> linked_options("Carl Boese", ["Payment On Demand", "My Cousin From Warsaw"], texts)
    ['My Cousin From Warsaw']
    >>> linked_options("1958", ["Payment On Demand", "My Cousin From Warsaw"], texts)
    []
    """
    said = _words(answer)
    if not said:
        return []
    return [o for o in options if any(said <= (words := _words(t)) and _words(o) <= words for t in texts)]


def held_to_options(result: RunResult, llm: LLM, *, trace: Trace | None = None, limit: int = MAX_PASSAGES) -> RunResult:
    """``result`` itself unless its question offers options and its answer names none or both;
    then the one option the run's text links the answer to (:func:`linked_options`, for a
    question naming its options), else the answer asked again among the options, kept when it
    names exactly one."""
    options = offered_options(result.question)
    named = named_options(result.answer, options)
    if not options or len(named) == 1:
        return result
    trace = trace or Trace(list(result.trace))
    linked = linked_options(result.answer, options, node_texts(result.trace)) if options != YES_NO and not named else []
    if len(linked) == 1:
        note = f"the answer {result.answer!r} named no option; the run's own text names it with {linked[0]!r} only"
        trace.record(Step(node=CHOICE_NODE, kind=StepKind.STOP, text=linked[0], started_ms=trace.now_ms(), note=note))
        return attrs.evolve(
            result, answer=linked[0], trace=trace.freeze(), stop_reason=stop_reasons(result.stop_reason, HELD)
        )
    refs = result.distinct_retrieved()[:limit]  # the first distinct passages, in retrieval order
    if not refs:
        return result
    note = f"the answer {result.answer!r} named {'both options' if named else 'no option'}: asked again among {' | '.join(options)}"
    answer = ask_again(llm, result.question, refs, choice(options, name="options"), trace, CHOICE_NODE, note)
    if len(named_options(answer, options)) != 1:
        return attrs.evolve(result, trace=trace.freeze())
    return attrs.evolve(result, answer=answer, trace=trace.freeze(), stop_reason=stop_reasons(result.stop_reason, HELD))

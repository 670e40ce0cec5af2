"""Demonstration leaks: a prediction that is a demonstration's answer with no retrieved passage
that contains it was copied from the prompt, not read from the corpus."""

from __future__ import annotations

from typing import Iterable

from nlqo.execution.answers import normalize_answer
from nlqo.execution.trace import RunResult
from nlqo.runtime.prompts import demonstration_answers


def demo_leak(answer: str, passages: Iterable[str], demos: Iterable[str] | None = None) -> str | None:
    """The demonstration answer ``answer`` repeats when none of ``passages`` contains it, else ``None``.

    >>> demo_leak("Jaws.", ["Alien is a 1979 film."])
    'Jaws'
    >>> demo_leak("Jaws", ["Jaws is a 1975 film by Steven Spielberg."]) is None
    True
    >>> demo_leak("Toronto", []) is None
    True
    """
    said = normalize_answer(answer)
    if not said:
        return None
    for demo in demonstration_answers() if demos is None else demos:
        if normalize_answer(demo) == said:
            if any(said in normalize_answer(text) for text in passages):
                return None
            return demo
    return None


def passage_texts(result: RunResult) -> list[str]:
    """The texts of every passage the run retrieved (its trace keeps them)."""
    return [p.text for p in result.retrieved]

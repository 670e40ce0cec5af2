"""Whether an answer is supported by the passages it was read from: the signal that lets a cascade
stop early or escalate (benchmarks/route_analysis.py at commit 197ff87: on the three dev sets an unsupported
standard-rag answer was right 0-5% of the time, a supported one 9-44%).

>>> passages = ["J. R. R. Tolkien wrote The Hobbit.", "Bloemfontein is a city where Tolkien was born."]
>>> support("J.R.R. Tolkien", "Who wrote The Hobbit?", passages).supported
False
>>> support("Bloemfontein", "Where was Tolkien born?", passages)
Support(supported=True, reason='found in the passages')
>>> support("The Hobbit", "Who wrote The Hobbit?", passages).reason
'the answer repeats the question'
>>> support("yes", "Who wrote The Hobbit?", passages).reason
'a yes/no answer to an open question'
>>> support("Alien", "Which film came out first, Jaws or Alien?", ["Alien came out in 1979."]).supported
True

An open question's answer must also be found in a passage linked to the question (:func:`linked`): a
passage that names a name of the question, or one that shares a name with such a passage. An answer
read from a passage about something else (a city the question's words merely resemble) is not
supported: among retrieve's answers on the calibration samples (the first 50 of HotpotQA, 2Wiki and
MuSiQue), 4 were found only in unlinked passages, and none of the 4 was right (scripts/confidence.py).

>>> passages = ["Jaws is a film by Steven Spielberg.", "Spielberg was born in Cincinnati.", "Paris is a city in France."]
>>> support("Cincinnati", "In which city was the director of Jaws born?", passages)
Support(supported=True, reason='found in the passages')
>>> support("Paris", "In which city was the director of Jaws born?", passages).reason
"found only in passages unlinked to the question's names"
"""

from __future__ import annotations

import re
from typing import Sequence

import attrs

from nlqo.execution.answers import normalize_answer
from nlqo.kinds import QuestionClass
from nlqo.parser.questions import question_class, options_of

_NAME = re.compile(r"\b[A-Z][\w'-]+")
_NOT_NAMES = frozenset(
    "the a an in on of at by to for from with as and or is was are were did does do what which who whom whose "
    "when where why how this that it he she they his her its their".split()
)
_UNKNOWN = re.compile(
    r"^(unknown|none|n a|no answer|not (mentioned|specified|provided|given|stated|known|available))\b"
)


SUPPORTED = "supported"
"""The 0/1 signal that an answer is supported (:func:`support`), as calibration reads it."""
AGREE = "agree"
"""The 0/1 signal that iterate's rounds gave the same answer, as calibration reads it."""
YES_NO = "yes_no_question"
"""The 0/1 signal that the question asks yes or no, so an answer picks one of two (its prior is a half)."""
SIGNALS = (SUPPORTED, AGREE, YES_NO)
"""An answer's 0/1 signals beside the model's confidence (:mod:`nlqo.planner.statistics.calibration`)."""


def yes_no_question(question: str) -> bool:
    """Whether ``question`` asks yes or no (:data:`YES_NO`).

    >>> yes_no_question("Is Paris in France?"), yes_no_question("Who wrote Dune?")
    (True, False)
    """
    return question_class(question) == QuestionClass.YES_NO


@attrs.frozen
class Support:
    supported: bool
    reason: str


def support(answer: str, question: str, passages: Sequence[str]) -> Support:
    """Whether ``answer`` to ``question`` is supported by ``passages`` (texts), and why not."""
    a = normalize_answer(answer)
    kind = question_class(question)
    yes_no = a in ("yes", "no")
    if not a or _UNKNOWN.match(a):
        return Support(False, "no answer")
    if kind == QuestionClass.YES_NO:
        return Support(yes_no, "a yes/no answer" if yes_no else "not a yes/no answer to a yes/no question")
    if yes_no:
        return Support(False, "a yes/no answer to an open question")
    if kind == QuestionClass.CHOICE:
        options = [normalize_answer(o) for o in options_of(question)]
        if not any(a == o or f" {a} " in f" {o} " or f" {o} " in f" {a} " for o in options):
            return Support(False, "names none of the offered options")
        return Support(True, "names an offered option")
    if f" {a} " in f" {normalize_answer(question)} ":
        return Support(False, "the answer repeats the question")
    text = " ".join(normalize_answer(p) for p in passages)
    if f" {a} " not in f" {text} ":
        return Support(False, "not found in the passages")
    if not any(f" {a} " in f" {normalize_answer(p)} " for p in linked(question, passages)):
        return Support(False, "found only in passages unlinked to the question's names")
    return Support(True, "found in the passages")


def names(text: str) -> set[str]:
    """The capitalised words of ``text`` that may name something (lower-cased; function words left out).

    >>> sorted(names("In which city was the author of The Hobbit born?"))
    ['hobbit']
    """
    return {w.lower() for w in _NAME.findall(text) if w.lower() not in _NOT_NAMES}


def linked(question: str, passages: Sequence[str]) -> list[str]:
    """The passages that name a name of the question, and those that share a name with one of them
    (one hop further: the bridge passage of a two-hop question); every passage when none names a name of
    the question (then nothing tells linked from unlinked)."""
    asked, found = names(question), [names(p) for p in passages]
    anchors = [n for n in found if n & asked]
    if not anchors:  # nothing to link to: every passage counts
        return list(passages)
    return [p for p, n in zip(passages, found) if n & asked or any(n & a for a in anchors)]

"""Whether an answer is supported by the passages it was read from: the signal that lets a cascade
stop early or escalate (benchmarks/route_analysis.py at commit 197ff87: on the three dev sets an unsupported
standard-rag answer was right 0-5% of the time, a supported one 9-44%).

>>> passages = ["J. R. R. Tolkien wrote The Hobbit.", "Bloemfontein is a city."]
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
"""

from __future__ import annotations

import re
from typing import Sequence

import attrs

from nlqo.execution.answers import normalize_answer
from nlqo.kinds import QuestionClass
from nlqo.parser.questions import question_class, options_of

_UNKNOWN = re.compile(
    r"^(unknown|none|n a|no answer|not (mentioned|specified|provided|given|stated|known|available))\b"
)


SUPPORTED = "supported"
"""The 0/1 signal that an answer is supported (:func:`support`), as calibration reads it."""
AGREE = "agree"
"""The 0/1 signal that iterate's rounds gave the same answer, as calibration reads it."""
SIGNALS = (SUPPORTED, AGREE)
"""An answer's 0/1 signals beside the model's confidence (:mod:`nlqo.planner.statistics.calibration`)."""


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
    return Support(True, "found in the passages")

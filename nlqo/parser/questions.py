"""Checks on a question before anything is loaded for it: one clear error instead of a model's confusion.

>>> check_question("Who wrote The Hobbit?")
>>> check_question("  ")
Traceback (most recent call last):
...
nlqo.errors.QuestionError: the question is empty
>>> check_question("Who wrote\\x00 The Hobbit?")
Traceback (most recent call last):
...
nlqo.errors.QuestionError: the question holds a control character (U+0000) at character 10; remove it
"""

from __future__ import annotations

import re
import unicodedata

from nlqo.errors import LimitError, QuestionError
from nlqo.kinds import QuestionClass

ALLOWED_CONTROLS = "\t\n\r"
"""Control characters a question may hold (a pasted question may span lines)."""


def check_question(text: str, *, max_chars: int | None = None, what: str = "question") -> None:
    """Raise :class:`QuestionError` unless ``text`` is something to ask: not blank, with a letter or
    digit, no control character but tab and line breaks, no half of a surrogate pair (what Python
    makes of bytes on the command line that are not UTF-8); :class:`LimitError` beyond ``max_chars``."""
    if max_chars is not None and len(text) > max_chars:
        raise LimitError(
            f"the {what} has {len(text):,} characters, more than {max_chars:,} "
            "(--max-question-chars, EngineConfig.max_question_chars); shorten it, or split it into questions"
        )
    if not text.strip():
        raise QuestionError(f"the {what} is empty")
    for i, ch in enumerate(text, start=1):
        if "\ud800" <= ch <= "\udfff":
            raise QuestionError(
                f"the {what} is not valid text: character {i} is half of a surrogate pair (U+{ord(ch):04X}), "
                "which is what bytes that are not UTF-8 become on the command line; check the terminal's encoding"
            )
        if unicodedata.category(ch) == "Cc" and ch not in ALLOWED_CONTROLS:
            raise QuestionError(f"the {what} holds a control character (U+{ord(ch):04X}) at character {i}; remove it")
    if not any(ch.isalnum() for ch in text):
        raise QuestionError(f"the {what} has no letter or digit: nothing to ask")


_WH = re.compile(r"(?:which|who|whose|what|where|when)\b", re.IGNORECASE)
_OR = re.compile(r",? or ")
_POLAR = re.compile(r"(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b", re.IGNORECASE)
_ASKS_WHAT = re.compile(r"\b(?:which|what|who|whom|whose|how)\b", re.IGNORECASE)
YES_NO = ("yes", "no")


def offered_options(question: str) -> tuple[str, ...]:
    """The two options of a ``<wh-word> ..., A or B?`` question, yes and no for a polar question,
    else ``()``.

    >>> offered_options("Which film came out first, Jaws or Alien?")
    ('Jaws', 'Alien')
    >>> offered_options("Which film has the director born earlier, Priscilla, Queen Of The Desert or Harvest: 3,000 Years?")
    ('Priscilla, Queen Of The Desert', 'Harvest: 3,000 Years')
    >>> offered_options("Which group has more members, DC Talk, or Manchester Orchestra?")
    ('DC Talk', 'Manchester Orchestra')
    >>> offered_options("Are Jaws and Alien both American films?")
    ('yes', 'no')
    >>> offered_options("Who directed Jaws?"), offered_options("Is Jaws or Alien older?"), offered_options("Will Smith starred in which film?")
    ((), (), ())
    """
    text = question.strip().removesuffix("?")
    if _POLAR.match(text):
        return () if " or " in text or _ASKS_WHAT.search(text) else YES_NO
    head, comma, tail = text.partition(", ")
    if not comma or not _WH.match(head.strip()):
        return ()
    options = tuple(part.strip().removesuffix("?").strip() for part in _OR.split(tail))
    return options if len(options) == 2 and all(options) and options[0] != options[1] else ()


def options_of(question: str) -> tuple[str, ...]:
    """The two options a choice question offers, else ``()``."""
    options = offered_options(question)
    return () if options == ("yes", "no") else options


def question_class(question: str) -> QuestionClass:
    """Yes/no, a choice between two offered options, or another question."""
    options = offered_options(question)
    if options == ("yes", "no"):
        return QuestionClass.YES_NO
    return QuestionClass.CHOICE if options else QuestionClass.OTHER

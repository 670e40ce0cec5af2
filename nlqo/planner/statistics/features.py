"""What the optimizer knows of a question before it runs anything expensive: its form, read from
its words. Statistics are kept per form where the sample allows (:mod:`nlqo.planner.statistics.store`).

>>> [str(question_class(q)) for q in ("Are Jaws and Alien both American films?",
...     "Which film came out first, Jaws or Alien?", "Who directed Jaws?")]
['yes-no', 'choice', 'other']
"""

from __future__ import annotations

from nlqo.parser.questions import offered_options
from nlqo.kinds import QuestionClass


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

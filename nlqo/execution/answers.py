"""What a strategy's final generation is turned into before it is scored.

Every strategy, baseline or engine, passes its answer text through ``short_answer``, so exact
match compares the same kind of string for all of them.
"""

from __future__ import annotations

import re
import string

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles, single spaces.

    >>> normalize_answer("  The Rush, band!")
    'rush band'
    """
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def visible(text: str) -> str:
    """Text before the first special-token marker (``<|endoftext|>`` and kin that a model emits
    without the backend treating it as the end).

    >>> visible("Spain<|endoftext|>Human: next")
    'Spain'
    """
    return text.split("<|", 1)[0]


_SCAFFOLD_LEAK = re.compile(r"\s*(?:\b(?:Main Question|Question|Contexts)\s*:|\(Plan step\b)")
_QUOTED_START = re.compile(r'^"([^"]+)"')
_LEAD_IN = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*:\s*(?=\S)", re.IGNORECASE)
"""A lead-in small models write before the answer ("The answer is: ..."); a colon is required."""
_NEXT_SENTENCE = re.compile(r"(?<=[a-z]{3})\.\s+(?=[A-Z])")
"""A full stop after three lower-case letters, then a capitalised word: the answer went on
into a sentence (``Maria von Trapp. Maria Augusta ...``). Initials (``Mark D. Fabiani``) and short
abbreviations (``St. Louis``) do not match; :data:`_ABBREVIATIONS` lists the longer ones."""
_ABBREVIATIONS = frozenset({"bros", "capt", "corp", "dept", "univ", "blvd", "assn", "prof", "sept"})
_YES_NO = re.compile(r"^(yes|no)\b(?=\s*[,.;:!]|$)", re.IGNORECASE)


def _first_sentence(line: str) -> str:
    for m in _NEXT_SENTENCE.finditer(line):
        word = re.findall(r"[A-Za-z]+$", line[: m.start()])
        if not word or word[0].lower() not in _ABBREVIATIONS:
            return line[: m.start()]
    return line


def short_answer(text: str, question: str = "") -> str:
    """The answer as exact match wants it: first line, no scaffold the model went on to write
    (including the linear template's plan-step hints), no "The answer is:" lead-in, no sentence after the first,
    no trailing period or quotes, a bare "yes"/"no" when the answer starts with one, and the
    quoted name when the answer starts with one (``"Title" is ...``). An answer that ``question``
    contains word for word is a name the question offers and stays whole, even when it starts
    like a yes or no (``No, No, Nanette``).

    >>> short_answer(' "Cincinnati".\\nMore text')
    'Cincinnati'
    >>> short_answer("Yes, both are shrubs. Main Question: Are Sut")
    'yes'
    >>> short_answer("No Doubt")
    'No Doubt'
    >>> short_answer("Murcia. Question: Where")
    'Murcia'
    >>> short_answer("Tottenham Hotspur F.C. (Plan step 1: ?club known as")
    'Tottenham Hotspur F.C'
    >>> short_answer(' "Summer Wars" is from Japan.')
    'Summer Wars'
    >>> short_answer("Maria von Trapp. Maria Augusta von Trapp (née Kutschera)")
    'Maria von Trapp'
    >>> short_answer("Warner Bros. Pictures"), short_answer("St. Louis Cardinals"), short_answer("Mark D. Fabiani")
    ('Warner Bros. Pictures', 'St. Louis Cardinals', 'Mark D. Fabiani')
    >>> short_answer("No, No, Nanette (1930 Film)"), short_answer("No, No, Nanette (1930 Film)", "Which died first, No, No, Nanette (1930 Film) or Up?")
    ('no', 'No, No, Nanette (1930 Film)')
    >>> short_answer("The answer is: Charles Babbage"), short_answer("Answer: yes, it is.")
    ('Charles Babbage', 'yes')
    >>> short_answer("")
    ''
    """
    text = visible(text)
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = _LEAD_IN.sub("", line, count=1)
    line = _SCAFFOLD_LEAK.split(line, 1)[0]
    line = _first_sentence(line)
    if m := _YES_NO.match(line.strip()):
        name = line.strip().rstrip(".").strip()
        if name.lower() != m.group(1).lower() and name.lower() in question.lower():
            return name
        return m.group(1).lower()
    if m := _QUOTED_START.match(line.strip()):
        return m.group(1).strip()
    return line.strip().rstrip(".").strip().strip("\"'").strip()

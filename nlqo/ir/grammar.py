"""The IR's generation grammar: what the parser lets a model write (``grammar/nlqo-generate.lark``).

The file holds the line-level rules; this module completes them for one question: atom ids in
order, at most ``max_atoms`` atoms, at most one relation line between atoms written, constants
that contain a word of the question, and the keyword ``answer``; optionally (``anchored``) the
first atom names a constant and (``spans``) constants are runs of the question's words. The
answer line is a second stage: :func:`answer_grammar` lists only the variables the reply's atoms
mention, so a reply that follows both stages is valid IR (no context-free grammar can tie the
answer to the atoms).

>>> text = 'q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer'
>>> print(answer_grammar(text))
start: " " (t0 | t1)
t0: "?d" (", " ("?city"))?
t1: "?city" (", " ("?d"))?
"""

from __future__ import annotations

import functools
import re

from nlqo.config import default
from nlqo.runtime.llm.constrain import Constraint, lark_literal
from nlqo.common.resources import builtin_dir

MAX_ATOMS: int = default("parse_atoms")
"""Atoms a constrained reply may have unless told otherwise (the parse prompt asks for one to four)."""
MAX_TARGETS = 2
"""Answer targets a constrained reply may name (a comparison names two)."""

# Bounds that appear in grammar/nlqo-generate.lark and in CONSTANT below, for the byte budget.
_VAR_CHARS = 25
_PREDICATE_CHARS = 40 + 2
_CONSTANT_CHARS = 60
_CONTEXT_CHARS = 30
_STRING_CHAR = r'[^"\\\x00-\x1f]'
_BOUNDARY = r'[^A-Za-z0-9"\\\x00-\x1f]'
_UTF8 = 4
"""Bytes one string character may take."""


@functools.cache
def _rules() -> str:
    return (builtin_dir("grammar") / "nlqo-generate.lark").read_text(encoding="utf-8")


def question_words(question: str) -> set[str]:
    """The words the grounding rule compares: runs of ASCII letters and digits longer than two,
    lower-cased. Split before lower-casing, as the grammar's word match does: case folding may
    change a string's length ("İ".lower() is two characters), never an ASCII word's.

    >>> sorted(question_words("Who directed Jaws (1975)?"))
    ['1975', 'directed', 'jaws', 'who']
    >>> sorted(question_words("THEİ"))
    ['the']
    """
    return {w.lower() for w in re.findall(r"[A-Za-z0-9]+", question) if len(w) > 2}


_SPAN_WORDS = 12
"""Words a constant of the span rule may have."""
_SPAN_CHARS = 80
"""Characters a constant of the span rule may have."""
_SPAN_CLOSERS = ")]'’?!."
"""Characters a span may end on when the question has them right after its last word ("(Film)")."""


def question_spans(question: str) -> list[str]:
    """The constants the span rule allows: runs of up to 12 consecutive words of the question, as
    written (whitespace runs as one space), with a closing bracket, quote or mark that follows the
    last word, at least three characters long, longest first.

    >>> question_spans("Who directed Jaws (Film)?")[:3]
    ['Who directed Jaws (Film)', 'Who directed Jaws (Film', 'directed Jaws (Film)']
    >>> "Jaws" in question_spans("Who directed Jaws?"), "the Jaws" in question_spans("Who directed Jaws?")
    (True, False)
    """
    words = list(re.finditer(r"\w+", question))
    spans: set[str] = set()
    for i, first in enumerate(words):
        for last in words[i : i + _SPAN_WORDS]:
            ends = [last.end()]
            if last.end() < len(question) and question[last.end()] in _SPAN_CLOSERS:
                ends.append(last.end() + 1)
            for end in ends:
                text = re.sub(r"\s+", " ", question[first.start() : end])
                if 3 <= len(text) <= _SPAN_CHARS and '"' not in text and "\\" not in text and text.isprintable():
                    spans.add(text)
    return sorted(spans, key=lambda t: (-len(t), t))


def _span_pattern(span: str) -> str:
    """``span`` as a regex of Lark's (and llguidance's) syntax: letters in either case, a space as
    one or two, every other character in a class of its own."""
    out = []
    for c in span:
        if c == " ":
            out.append("[ ]{1,2}")
        elif c.isalpha() and len(c.upper()) == 1 and len(c.lower()) == 1 and c.upper() != c.lower():
            out.append(f"[{c.upper()}{c.lower()}]")
        elif c.isalnum() or ord(c) > 127:
            out.append(c)
        else:
            out.append(f"[\\{c}]" if c in "]\\^-/" else f"[{c}]")
    return "".join(out)


def constant_terminal(question: str | None, *, spans: bool = False) -> str:
    """The CONSTANT terminal: a quoted string holding a question word as a whole word, or with
    ``spans`` a quoted run of the question's words (:func:`question_spans`, any case). Any quoted
    string when there is no question or it has no such word or run.

    >>> pattern = re.compile(constant_terminal("Who directed Jaws?", spans=True).split("/")[1])
    >>> [bool(pattern.fullmatch(s)) for s in ('"Jaws"', '"JAWS"', '"directed  Jaws"', '"the jaws"', '"?jaws"', '"Dracula"')]
    [True, True, True, False, False, False]
    >>> pattern = re.compile(constant_terminal("Who directed Jaws?").split("/")[1])
    >>> [bool(pattern.fullmatch(s)) for s in ('"Jaws"', '"JAWS 2"', '"the jaws"', '"Jawsome"', '"Dracula"')]
    [True, True, True, False, False]
    """
    runs = question_spans(question or "") if spans else []
    if runs:
        return f'CONSTANT: /"(?:{"|".join(_span_pattern(r) for r in runs)})"/'
    words = sorted(question_words(question or ""), key=lambda w: (-len(w), w))
    if not words:
        return f'CONSTANT: /"{_STRING_CHAR}{{1,{_CONSTANT_CHARS}}}"/'
    alternatives = "|".join("".join(f"[{c.upper()}{c}]" if c.isalpha() else c for c in w) for w in words)
    before = f"(?:{_STRING_CHAR}{{0,{_CONTEXT_CHARS}}}{_BOUNDARY})?"
    after = f"(?:{_BOUNDARY}{_STRING_CHAR}{{0,{_CONTEXT_CHARS}}})?"
    return f'CONSTANT: /"{before}(?:{alternatives}){after}"/'


def _relation(k: int) -> list[str]:
    """The rule of a relation line between two different atoms of q1..qk (one line: a single pin
    cannot contradict another, and pins that contradict are a semantic error)."""
    if k < 2:
        return []
    lines = [f'"relation q{i} " KIND " q{j}\\n"' for i in range(1, k + 1) for j in range(1, k + 1) if i != j]
    return [f"rel{k}: " + " | ".join(lines)]


def _chain(max_atoms: int, ending: str, anchored: bool = default("anchored")) -> list[str]:
    """``start`` and the rules after each atom: the next atom, or a relation line then ``ending``.
    With ``anchored`` the first atom names a constant (the grammar file's ``anchored`` triple)."""
    if max_atoms < 1:
        raise ValueError(f"max_atoms must be at least 1, not {max_atoms}")
    rules = [f'start: "q1 = " {"anchored" if anchored else "triple"} after1']
    for k in range(1, max_atoms + 1):
        finish = (f"rel{k}? " if k > 1 else "") + ending
        more = f'"q{k + 1} = " triple after{k + 1} | ' if k < max_atoms else ""
        rules.append(f"after{k}: {more}{finish}")
        rules += _relation(k)
    return rules


def generation_grammar(
    max_atoms: int = MAX_ATOMS,
    question: str | None = None,
    *,
    anchored: bool = default("anchored"),
    spans: bool = False,
) -> str:
    """The first stage: atoms, a relation line and the keyword ``answer`` (Lark, also read by llguidance).
    With ``anchored`` the first atom names a constant; ``spans``: :func:`constant_terminal`."""
    return "\n".join([_rules(), *_chain(max_atoms, '"answer"', anchored), constant_terminal(question, spans=spans), ""])


def whole_grammar(
    max_atoms: int = MAX_ATOMS,
    question: str | None = None,
    *,
    anchored: bool = default("anchored"),
    spans: bool = False,
) -> str:
    """One grammar for a whole reply, answer line included, for servers that take a single grammar:
    the answer may name any variable (validation after the fact catches one no atom mentions)."""
    answer = '"answer " VAR' + ' (", " VAR)?' * (MAX_TARGETS - 1)
    return "\n".join([_rules(), *_chain(max_atoms, answer, anchored), constant_terminal(question, spans=spans), ""])


_QUOTED = re.compile(r'"[^"]*"')
_VARIABLE = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")
_ATOM_ID = re.compile(r"^(q\d+) = ", re.MULTILINE)


def mentioned(text: str) -> tuple[list[str], list[str]]:
    """Variables (first mention first) and atom ids of a first-stage reply.

    >>> mentioned('q1 = (?d, "what ?x is", "Jaws")\\nanswer')
    (['?d'], ['q1'])
    """
    bare = _QUOTED.sub("", text)
    return list(dict.fromkeys(_VARIABLE.findall(bare))), _ATOM_ID.findall(text)


def answer_grammar(text: str, max_targets: int = MAX_TARGETS) -> str:
    """The second stage: the rest of the answer line, naming only variables ``text`` mentions
    (distinct, at most ``max_targets``), or atom ids when no atom has a variable."""
    variables, ids = mentioned(text)
    targets = variables or ids
    if not targets:
        raise ValueError("a first-stage reply without atoms has nothing to answer")
    rules = ['start: " " (' + " | ".join(f"t{i}" for i in range(len(targets))) + ")"]
    for i, target in enumerate(targets):
        others = [lark_literal(t) for t in targets if t != target]
        tail = f' (", " ({" | ".join(others)}))?' if others and max_targets > 1 else ""
        rules.append(f"t{i}: {lark_literal(target)}{tail}")
    return "\n".join(rules)


def max_reply_bytes(max_atoms: int = MAX_ATOMS, question: str | None = None) -> int:
    """An upper bound on the bytes of a reply the two stages allow; as every token is at least a
    byte, a token budget this large never cuts a constrained reply short.

    >>> max_reply_bytes(1) < max_reply_bytes(2)
    True
    """
    words = question_words(question or "")
    longest_word = max((len(w) for w in words), default=0)
    constant = 2 + _UTF8 * max(_CONSTANT_CHARS + longest_word, 2 * (_CONTEXT_CHARS + 1) + longest_word, 2 * _SPAN_CHARS)
    term = max(_VAR_CHARS, constant)
    digits = len(str(max_atoms))
    atom = len("q = (, , )\n") + digits + 2 * term + _UTF8 * _PREDICATE_CHARS
    relation = len("relation q sibling q\n") + 2 * digits
    answer = len("answer ") + MAX_TARGETS * (_VAR_CHARS + 2)
    return max_atoms * atom + (relation if max_atoms > 1 else 0) + answer


def ir_constraint(
    question: str | None = None,
    max_atoms: int = MAX_ATOMS,
    *,
    anchored: bool = default("anchored"),
    spans: bool = False,
) -> Constraint:
    """The parser's constraint: :func:`generation_grammar`, then :func:`answer_grammar`."""
    return Constraint(
        generation_grammar(max_atoms, question, anchored=anchored, spans=spans),
        name=f"nlqo-generate(max_atoms={max_atoms}{', anchored' if anchored else ''}{', span constants' if spans else ''})",
        then=answer_grammar,
        whole=whole_grammar(max_atoms, question, anchored=anchored, spans=spans),
    )

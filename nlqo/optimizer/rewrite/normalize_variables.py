"""Normalise variable names and the spacing of constants."""

from __future__ import annotations

import re

import attrs

from nlqo.ir import Atom, Const, Term, Var
from nlqo.optimizer.rewrite import Program


def _name(name: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9_]", "_", name.lower())).strip("_") or "x"


def _term(t: Term) -> Term:
    if isinstance(t, Var):
        return Var(_name(t.name))
    return Const(re.sub(r"\s+", " ", t.text).strip())


def normalize_variables(program: Program) -> Program:
    """Lower-case variable names (``?Band`` and ``?band`` are one variable) and collapse spaces in constants.

    >>> from nlqo.ir.syntax import parse, render
    >>> q = parse('q1 = (?Band, " released ", "Counterparts")\\nq2 = (?band, "from", "Canada")\\nanswer ?Band')
    >>> print(render(normalize_variables(Program(q)).query), end="")
    q1 = (?band, "released", "Counterparts")
    q2 = (?band, "from", "Canada")
    answer ?band
    """
    q = program.query
    atoms = tuple(Atom(a.id, _term(a.subject), _term(a.predicate), _term(a.object)) for a in q.atoms)
    answer = tuple(dict.fromkeys(Var(_name(t.name)) if isinstance(t, Var) else t for t in q.answer))
    return attrs.evolve(program, query=attrs.evolve(q, atoms=atoms, answer=answer))

"""The IR: a question as a small program of subject-predicate-object atoms.

Values are immutable; change them with :func:`attrs.evolve`. Text form: :mod:`nlqo.ir.syntax`.
"""

from __future__ import annotations

import functools
import json
from typing import Mapping, Union

import attrs

from nlqo.kinds import PINNABLE, RelationKind


@attrs.frozen(order=True)
class Var:
    """A variable, written ``?name``."""

    name: str

    def __str__(self) -> str:
        return "?" + self.name


@attrs.frozen(order=True)
class Const:
    """A constant, written as a double-quoted string with JSON escapes."""

    text: str

    def __str__(self) -> str:
        return json.dumps(self.text, ensure_ascii=False)


Term = Union[Var, Const]


@attrs.frozen
class Atom:
    """One atomic query: a subject-predicate-object triple with an id."""

    id: str
    subject: Term
    predicate: Term
    object: Term

    @property
    def terms(self) -> tuple[Term, Term, Term]:
        return (self.subject, self.predicate, self.object)

    @functools.cached_property
    def variables(self) -> frozenset[str]:
        """Names of the variables the atom mentions."""
        return frozenset(t.name for t in self.terms if isinstance(t, Var))

    def text(self) -> str:
        """A plain-language rendering, e.g. ``?band released "Counterparts"`` -> ``?band released Counterparts``.

        >>> Atom("q1", Var("band"), Const("released"), Const("Counterparts")).text()
        '?band released Counterparts'
        """
        return " ".join(str(t) if isinstance(t, Var) else t.text for t in self.terms)


@attrs.frozen
class Relation:
    """A pinned relation between two atoms.

    ``parent``: ``right``'s answer feeds ``left`` (``right`` is ``left``'s child).
    ``sibling``: independent parts of one parent. ``none``: unrelated.
    """

    left: str
    kind: RelationKind = attrs.field(converter=RelationKind, validator=attrs.validators.in_(PINNABLE))
    right: str


@attrs.frozen
class Query:
    """A parsed question: atoms, pinned relations and what answers it.

    ``answer`` holds what answers the question: :class:`Var` s (variables whose values answer it)
    and ids of atoms whose answers do; more than one when the question compares or combines
    them ("Which film came out first, A or B?"). A single target is accepted and wrapped.
    """

    atoms: tuple[Atom, ...]
    answer: tuple[Var | str, ...] = attrs.field(converter=lambda t: tuple(t) if isinstance(t, (tuple, list)) else (t,))
    question: str | None = None
    relations: tuple[Relation, ...] = ()

    @functools.cached_property
    def _by_id(self) -> Mapping[str, Atom]:
        return {a.id: a for a in self.atoms}

    def atom(self, atom_id: str) -> Atom:
        return self._by_id[atom_id]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(a.id for a in self.atoms)

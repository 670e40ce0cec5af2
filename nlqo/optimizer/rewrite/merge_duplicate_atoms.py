"""Merge atoms that state the same triple."""

from __future__ import annotations

import attrs

from nlqo.ir import Atom, Const, Relation
from nlqo.optimizer.rewrite import Program


def _key(atom: Atom) -> tuple:
    return tuple(("c", t.text.lower()) if isinstance(t, Const) else ("v", t.name) for t in atom.terms)


def merge_duplicate_atoms(program: Program) -> Program:
    """Keep the first of atoms with the same triple (constants compared case-insensitively).

    Relations and an answer that named a dropped atom now name the kept one.

    >>> from nlqo.ir.syntax import parse
    >>> q = parse('q1 = (?x, "born in", "Paris")\\nq2 = (?x, "Born in", "paris")\\nanswer q2')
    >>> p = merge_duplicate_atoms(Program(q))
    >>> [a.id for a in p.query.atoms], p.query.answer, p.warnings
    (['q1'], ('q1',), ('merged into q1 (the same triple): q2 (?x Born in paris)',))
    """
    q = program.query
    first: dict[tuple, str] = {}
    rename: dict[str, str] = {}
    atoms = []
    for a in q.atoms:
        k = _key(a)
        if k in first:
            rename[a.id] = first[k]
            program = program.took_out(a, f"merged into {first[k]} (the same triple)")
        else:
            first[k] = a.id
            atoms.append(a)
    if not rename:
        return program
    relations: list[Relation] = []
    seen = set()
    for r in q.relations:
        left, right = rename.get(r.left, r.left), rename.get(r.right, r.right)
        if left != right and (left, right) not in seen:
            seen.add((left, right))
            relations.append(Relation(left, r.kind, right))
    answer = tuple(dict.fromkeys(rename.get(t, t) if isinstance(t, str) else t for t in q.answer))
    query = attrs.evolve(q, atoms=tuple(atoms), relations=tuple(relations), answer=answer)
    return attrs.evolve(program, query=query)

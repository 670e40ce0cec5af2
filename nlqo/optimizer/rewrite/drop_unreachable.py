"""Drop atoms with no path to the answer through shared variables or pinned relations."""

from __future__ import annotations

import attrs

from nlqo.optimizer.relations import depths
from nlqo.optimizer.rewrite import Program


def drop_unreachable(program: Program) -> Program:
    """Atoms linked to the answer by no chain of shared variables and pinned relations cannot contribute to it.

    >>> from nlqo.ir.syntax import parse
    >>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?x, "capital of", "France")\\nanswer ?d')
    >>> p = drop_unreachable(Program(q))
    >>> [a.id for a in p.query.atoms], p.warnings
    (['q1'], ('no path to the answer through shared variables or pinned relations: q2 (?x capital of France)',))
    """
    q = program.query
    depth = depths(q)
    gone = [a for a in q.atoms if depth[a.id] is None]
    if not gone:
        return program
    for a in gone:
        program = program.took_out(a, "no path to the answer through shared variables or pinned relations")
    ids = {a.id for a in gone}
    query = attrs.evolve(
        q,
        atoms=tuple(a for a in q.atoms if a.id not in ids),
        relations=tuple(r for r in q.relations if r.left not in ids and r.right not in ids),
    )
    return attrs.evolve(program, query=query)

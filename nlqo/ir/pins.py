"""Consistency of pinned relations: a plan is a tree, so pins must describe one.

Three ways pins contradict each other, each reported with every line involved:

* a cycle of ``parent`` pins (``relation q1 parent q2`` and ``relation q2 parent q1``);
* an atom pinned under two parents (a tree node has one);
* one pair pinned as two different kinds (``parent`` and ``sibling``, say).

>>> from nlqo.ir import Relation
>>> check_pins([Relation("q1", "parent", "q2"), Relation("q2", "parent", "q1")], lines=[3, 4])
Traceback (most recent call last):
...
nlqo.errors.IRSemanticError: <ir>:3: contradictory pins on lines 3 and 4: parent pins make a cycle q1 -> q2 -> q1 (a plan is a tree; drop or turn one of them)
"""

from __future__ import annotations

from typing import Sequence

from nlqo.errors import IRSemanticError
from nlqo.ir import Relation
from nlqo.kinds import RelationKind


def _lines_text(lines: Sequence[int]) -> str:
    shown = sorted(set(lines))
    if len(shown) == 1:
        return f"line {shown[0]}"
    return "lines " + ", ".join(map(str, shown[:-1])) + f" and {shown[-1]}"


def check_pins(
    relations: Sequence[Relation], *, lines: Sequence[int | None] | None = None, source: str = "<ir>"
) -> None:
    """Raise :class:`IRSemanticError` naming every line involved when ``relations`` contradict each other.

    ``lines[i]`` is the line of ``relations[i]`` (``None`` or absent for pins not read from a file).
    """
    where = list(lines) if lines is not None else [None] * len(relations)

    def fail(message: str, involved: Sequence[int]) -> None:
        found = tuple(sorted({n for n in (where[i] for i in involved) if n}))
        prefix = f"contradictory pins on {_lines_text(found)}" if found else "contradictory pins"
        raise IRSemanticError(f"{prefix}: {message}", lines=found, source=source)

    parent_of: dict[str, tuple[str, int]] = {}
    for i, r in enumerate(relations):
        if r.kind != RelationKind.PARENT:
            continue
        if r.right in parent_of and parent_of[r.right][0] != r.left:
            other, j = parent_of[r.right]
            fail(
                f"{r.right} is pinned under both {other} and {r.left} (a plan is a tree: an atom has one parent)",
                (j, i),
            )
        parent_of.setdefault(r.right, (r.left, i))
    for start in sorted(parent_of):
        path, seen = [start], {start}
        node = start
        while node in parent_of:
            node = parent_of[node][0]
            if node in seen:
                cycle = path[path.index(node) :] + [node]
                chain = " -> ".join(reversed(cycle))
                involved = [parent_of[c][1] for c in cycle[:-1]]
                fail(f"parent pins make a cycle {chain} (a plan is a tree; drop or turn one of them)", involved)
            seen.add(node)
            path.append(node)
    kinds: dict[frozenset[str], tuple[tuple[str, str, RelationKind], int]] = {}
    for i, r in enumerate(relations):
        pair = frozenset((r.left, r.right))
        oriented = (r.left, r.right, r.kind) if r.kind == RelationKind.PARENT else (*sorted((r.left, r.right)), r.kind)
        if pair in kinds and kinds[pair][0] != oriented:
            (a, b, kind), j = kinds[pair]
            fail(f"{a} {kind} {b} and {r.left} {r.kind} {r.right} cannot both hold", (j, i))
        kinds.setdefault(pair, (oriented, i))  # type: ignore[arg-type]

"""Pair relations between atoms: what the triples decide, what is pinned, what an LLM is asked.

Relations are oriented: ``table[(a, b)] == "parent"`` means ``b``'s answer feeds ``a``.
Only pairs the triples leave undecided reach the LLM, and every answer is cached by the
normalised texts of the two atoms.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Mapping

import attrs

from nlqo.ir import Atom, Query, Var
from nlqo.llm.base import LLM, Usage, chat_reusing_prefix
from nlqo.llm.constrain import can_constrain, choice, constrained_chat
from nlqo.prompts import planning

KINDS = ("parent", "child", "sibling", "none")
_FLIP = {"parent": "child", "child": "parent", "sibling": "sibling", "none": "none"}


def flip(kind: str) -> str:
    """The relation seen from the other atom.

    >>> flip("parent")
    'child'
    """
    return _FLIP[kind]


def depths(query: Query) -> dict[str, int | None]:
    """Distance of each atom from the answer, counted in shared variables.

    Atoms that mention the answer variable (or the answer atom) have depth 0; atoms sharing a
    variable with a depth-d atom have depth d+1; atoms with no variable path to it have ``None``.
    """
    by_var: dict[str, list[Atom]] = {}
    for a in query.atoms:
        for v in a.variables:
            by_var.setdefault(v, []).append(a)
    start: list[str] = []
    for target in query.answer:
        found = [a.id for a in by_var.get(target.name, [])] if isinstance(target, Var) else [target]
        start += [s for s in found if s not in start]
    depth: dict[str, int | None] = {a.id: None for a in query.atoms}
    queue = deque(start)
    for s in start:
        depth[s] = 0
    while queue:
        current = query.atom(queue.popleft())
        for v in sorted(current.variables):
            for other in by_var[v]:
                if depth[other.id] is None:
                    depth[other.id] = depth[current.id] + 1  # type: ignore[operator]
                    queue.append(other.id)
    return depth


def infer(query: Query) -> dict[tuple[str, str], str | None]:
    """Relations the triples and pinned statements decide, for every pair ``(a, b)`` with a before b.

    ``None`` marks a pair left to the LLM: the two atoms share a variable at the same depth.
    Pairs that share no variable are ``none``; pairs sharing a variable at different depths are
    parent (the shallower one) and child.

    >>> from nlqo.syntax import parse
    >>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?c)\\nanswer ?c')
    >>> infer(q)
    {('q1', 'q2'): 'child'}
    """
    depth = depths(query)
    pinned: dict[tuple[str, str], str] = {}
    for r in query.relations:
        pinned[(r.left, r.right)] = r.kind
        pinned[(r.right, r.left)] = flip(r.kind) if r.kind == "parent" else r.kind
    out: dict[tuple[str, str], str | None] = {}
    atoms = query.atoms
    for i, a in enumerate(atoms):
        for b in atoms[i + 1 :]:
            key = (a.id, b.id)
            if key in pinned:
                out[key] = pinned[key]
            elif not (a.variables & b.variables):
                out[key] = "none"
            elif depth[a.id] is None or depth[b.id] is None or depth[a.id] == depth[b.id]:
                out[key] = None
            else:
                out[key] = "parent" if depth[a.id] < depth[b.id] else "child"  # type: ignore[operator]
    return out


def normalise_atom_text(atom: Atom) -> str:
    """Cache key text of an atom: lower case, single spaces.

    >>> normalise_atom_text(Atom("q", Var("X"), Var("p"), Var("Y")))
    '?x ?p ?y'
    """
    return re.sub(r"\s+", " ", atom.text()).strip().lower()


@attrs.define(eq=False)
class RelationCache:
    """Answers about atom pairs, keyed by their normalised texts; optionally persisted as JSON."""

    path: Path | None = None
    entries: dict[str, str] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @classmethod
    def open(cls, path: str | Path) -> "RelationCache":
        path = Path(path)
        entries = json.loads(path.read_text()) if path.exists() else {}
        return cls(path=path, entries=entries)

    @staticmethod
    def _key(a: str, b: str) -> str:
        return f"{a}\t{b}"

    def get(self, a: Atom, b: Atom) -> str | None:
        ta, tb = normalise_atom_text(a), normalise_atom_text(b)
        with self._lock:
            if (kind := self.entries.get(self._key(ta, tb))) is not None:
                return kind
            if (kind := self.entries.get(self._key(tb, ta))) is not None:
                return flip(kind)
        return None

    def put(self, a: Atom, b: Atom, kind: str) -> None:
        with self._lock:
            self.entries[self._key(normalise_atom_text(a), normalise_atom_text(b))] = kind

    def save(self) -> None:
        """Write atomically (temp file, then rename) when the cache has a path."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            data = json.dumps(self.entries, indent=0, sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".relations-")
        with os.fdopen(fd, "w") as f:
            f.write(data)
        os.replace(tmp, self.path)


@attrs.frozen
class RelationStats:
    llm_calls: int = 0
    cache_hits: int = 0
    inferred: int = 0
    pruned_pairs: int = 0
    """Pairs that are ``none``: never joined by the optimizer."""
    usage: Usage = Usage()


@attrs.frozen
class Relations:
    """The decided relation of every atom pair, plus how they were decided."""

    table: Mapping[tuple[str, str], str]
    source: Mapping[tuple[str, str], str]
    """'pinned', 'inferred', 'cache' or 'llm' per pair."""
    stats: RelationStats

    def kind(self, a: str, b: str) -> str:
        if (a, b) in self.table:
            return self.table[(a, b)]
        return flip(self.table[(b, a)])


def parse_kind(text: str) -> str | None:
    """Read a relation word out of an LLM reply.

    >>> parse_kind(" Parent.")
    'parent'
    >>> parse_kind("I think they are siblings") is None
    True
    """
    word = re.sub(r"[^a-z]", "", (text.strip().split() or [""])[0].lower())
    return word if word in KINDS else None


Ask = Callable[[Query, Atom, Atom], tuple[str | None, Usage]]


RELATION_LABELS = choice(KINDS, name="relation")
"""The relation reply constrained: exactly one of the four words, nothing after it."""


def llm_asker(llm: LLM, *, retries: int = 1, constrained: bool = True) -> Ask:
    """Ask ``llm`` for the relation of a pair; ``None`` when no reply is readable.

    With ``constrained`` (and a backend that can apply a grammar) the reply is one of the four
    words by construction and ends there: no stop-token step, no retry.
    """
    constraint = RELATION_LABELS if constrained and can_constrain(llm) else None

    def ask(query: Query, a: Atom, b: Atom) -> tuple[str | None, Usage]:
        usage = Usage()
        prompt = planning.RELATION
        for _ in range(retries + 1):
            messages = prompt.messages(question=query.question or "", a=a.text(), b=b.text())
            if constraint is None:
                reply = chat_reusing_prefix(llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
            else:
                reply = constrained_chat(llm, messages, constraint, stop=prompt.stop, max_tokens=prompt.max_tokens)
            usage = usage + reply.usage
            if (kind := parse_kind(reply.text)) is not None:
                return kind, usage
        return None, usage

    return ask


def resolve(query: Query, *, ask: Ask | None = None, cache: RelationCache | None = None, undecided: str = "sibling") -> Relations:
    """Decide every pair: pinned and inferred first, then the cache, then ``ask``.

    Pairs still undecided (no asker, or an unreadable reply) get ``undecided``.
    """
    table: dict[tuple[str, str], str] = {}
    source: dict[tuple[str, str], str] = {}
    pinned = {(r.left, r.right) for r in query.relations} | {(r.right, r.left) for r in query.relations}
    calls = hits = inferred = 0
    usage = Usage()
    for key, kind in infer(query).items():
        if kind is not None:
            table[key], source[key] = kind, ("pinned" if key in pinned else "inferred")
            inferred += key not in pinned
            continue
        a, b = query.atom(key[0]), query.atom(key[1])
        if cache is not None and (cached := cache.get(a, b)) is not None:
            table[key], source[key] = cached, "cache"
            hits += 1
            continue
        answer = None
        if ask is not None:
            answer, spent = ask(query, a, b)
            usage = usage + spent
            calls += spent.calls
            if answer is not None and cache is not None:
                cache.put(a, b, answer)
        table[key], source[key] = (answer, "llm") if answer is not None else (undecided, "default")
    pruned = sum(1 for k in table.values() if k == "none")
    stats = RelationStats(llm_calls=calls, cache_hits=hits, inferred=inferred, pruned_pairs=pruned, usage=usage)
    return Relations(table=table, source=source, stats=stats)

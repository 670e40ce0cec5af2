"""Pair relations between atoms: what the triples decide, what is pinned, what an LLM is asked.

Relations are oriented: ``table[(a, b)] == "parent"`` means ``b``'s answer feeds ``a``.
Only pairs the triples leave undecided reach the LLM, and every answer is cached by the
normalised texts of the two atoms.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import re
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Iterator, Mapping

import attrs

from nlqo.common.storage import replace_atomically
from nlqo.config import default
from nlqo.ir import Atom, Query, Var
from nlqo.kinds import RelationKind, RelationSource
from nlqo.runtime.llm.base import LLM, Usage, chat_reusing_prefix
from nlqo.runtime.llm.constrain import can_constrain, choice, constrained_chat
from nlqo.runtime.prompts import planning

KINDS = RelationKind.values()


def flip(kind: str) -> RelationKind:
    """The relation seen from the other atom.

    >>> print(flip("parent"))
    child
    """
    return RelationKind(kind).flip()


def depths(query: Query) -> dict[str, int | None]:
    """Distance of each atom from the answer, through shared variables and pinned relations.

    Atoms that mention an answer variable (or are answer atoms) have depth 0. A step through a
    shared variable, or down a ``parent`` pin (from the parent to the child it is fed by), adds
    one; a ``sibling`` pin joins two atoms at the same depth. Atoms with no such path have ``None``.

    >>> from nlqo.ir.syntax import parse
    >>> depths(parse('q1 = (?a, "p", "x")\\nq2 = ("y", "r", ?b)\\nrelation q1 parent q2\\nanswer ?a'))
    {'q1': 0, 'q2': 1}
    """
    by_var: dict[str, list[str]] = {}
    for a in query.atoms:
        for v in a.variables:
            by_var.setdefault(v, []).append(a.id)
    below: dict[str, list[str]] = {}
    beside: dict[str, list[str]] = {}
    for r in query.relations:
        if r.kind == RelationKind.PARENT:
            below.setdefault(r.left, []).append(r.right)
        elif r.kind == RelationKind.SIBLING:
            beside.setdefault(r.left, []).append(r.right)
            beside.setdefault(r.right, []).append(r.left)
    depth: dict[str, int | None] = {a.id: None for a in query.atoms}
    queue: deque[tuple[str, int]] = deque()
    for target in query.answer:
        for s in by_var.get(target.name, []) if isinstance(target, Var) else [target]:
            queue.append((s, 0))
    while queue:  # 0-1 breadth-first search: sibling pins cost nothing, every other step one
        node, d = queue.popleft()
        known = depth[node]
        if known is not None and known <= d:
            continue
        depth[node] = d
        for other in beside.get(node, ()):
            queue.appendleft((other, d))
        for other in (*below.get(node, ()), *(o for v in sorted(query.atom(node).variables) for o in by_var[v])):
            queue.append((other, d + 1))
    return depth


def infer(query: Query) -> dict[tuple[str, str], RelationKind | None]:
    """Relations the triples and pinned statements decide, for every pair ``(a, b)`` with a before b.

    ``None`` marks a pair left to the LLM: the two atoms share a variable at the same depth.
    Pairs that share no variable are ``none``; pairs sharing a variable at different depths are
    parent (the shallower one) and child. Pins win.

    >>> from nlqo.ir.syntax import parse
    >>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?c)\\nanswer ?c')
    >>> {k: str(v) for k, v in infer(q).items()}
    {('q1', 'q2'): 'child'}
    """
    depth = depths(query)
    pinned: dict[tuple[str, str], RelationKind] = {}
    for r in query.relations:
        pinned[(r.left, r.right)] = r.kind
        pinned[(r.right, r.left)] = r.kind.flip()
    out: dict[tuple[str, str], RelationKind | None] = {}
    atoms = [(a.id, a.variables, depth[a.id]) for a in query.atoms]
    for i, (a, va, da) in enumerate(atoms):
        for b, vb, db in atoms[i + 1 :]:
            key = (a, b)
            if key in pinned:
                out[key] = pinned[key]
            elif va.isdisjoint(vb):
                out[key] = RelationKind.NONE
            elif da is None or db is None or da == db:
                out[key] = None
            else:
                out[key] = RelationKind.PARENT if da < db else RelationKind.CHILD
    return out


def normalise_atom_text(atom: Atom) -> str:
    """Cache key text of an atom: lower case, single spaces.

    >>> normalise_atom_text(Atom("q", Var("X"), Var("p"), Var("Y")))
    '?x ?p ?y'
    """
    return re.sub(r"\s+", " ", atom.text()).strip().lower()


@attrs.define(eq=False)
class RelationCache:
    """Answers about atom pairs, keyed by their normalised texts; optionally persisted as JSON.

    ``save`` merges with what other processes saved to the same file meanwhile (under an exclusive
    lock on ``<path>.lock``) and replaces the file atomically, so concurrent writers lose nothing
    and a reader never sees a half-written file.
    """

    path: Path | None = None
    entries: dict[str, str] = attrs.field(factory=dict)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    @classmethod
    def open(cls, path: str | Path) -> "RelationCache":
        path = Path(path)
        return cls(path=path, entries=_read_entries(path))

    @staticmethod
    def _key(a: str, b: str) -> str:
        return f"{a}\t{b}"

    def get(self, a: Atom, b: Atom) -> RelationKind | None:
        ta, tb = normalise_atom_text(a), normalise_atom_text(b)
        with self._lock:
            if (kind := self.entries.get(self._key(ta, tb))) in KINDS:
                return RelationKind(kind)
            if (kind := self.entries.get(self._key(tb, ta))) in KINDS:
                return flip(kind)
        return None

    def put(self, a: Atom, b: Atom, kind: str) -> None:
        with self._lock:
            self.entries[self._key(normalise_atom_text(a), normalise_atom_text(b))] = str(kind)

    def verdict(self, key: str) -> str | None:
        """A stored answer under a free-form ``key`` (the optimizer's merge checks), under the lock."""
        with self._lock:
            return self.entries.get(key)

    def put_verdict(self, key: str, verdict: str) -> None:
        with self._lock:
            self.entries[key] = verdict

    def save(self) -> None:
        """Merge with the file's current entries and write atomically, when the cache has a path."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path), self._lock:
            merged = {**_read_entries(self.path), **self.entries}
            self.entries = merged
            replace_atomically(self.path, json.dumps(merged, indent=0, sort_keys=True), prefix=".relations-")


def _read_entries(path: Path) -> dict[str, str]:
    from nlqo.common.paths import found
    from nlqo.errors import ConfigError

    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except OSError:  # a folder, a file that cannot be read, a path under a file
        raise ConfigError(f"{path}: expected a relation cache file (JSON), found {found(path)}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a relation cache (JSON object of pair -> kind): {exc}") from None
    except RecursionError:  # '[' * 100000
        raise ConfigError(f"{path}: not a relation cache (JSON object of pair -> kind): nested too deeply") from None
    if not isinstance(entries, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
        raise ConfigError(f"{path}: not a relation cache (JSON object of pair -> kind)")
    return entries


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(f"{path}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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

    table: Mapping[tuple[str, str], RelationKind]
    source: Mapping[tuple[str, str], RelationSource]
    stats: RelationStats


def parse_kind(text: str) -> RelationKind | None:
    """Read a relation word out of an LLM reply.

    >>> print(parse_kind(" Parent."))
    parent
    >>> parse_kind("I think they are siblings") is None
    True
    """
    word = re.sub(r"[^a-z]", "", (text.strip().split() or [""])[0].lower())
    return RelationKind(word) if word in KINDS else None


Ask = Callable[[Query, Atom, Atom], tuple[RelationKind | None, Usage]]


RELATION_LABELS = choice(KINDS, name="relation")
"""The relation reply constrained: exactly one of the four words, nothing after it."""


def llm_asker(llm: LLM, *, retries: int = 1, constrained: bool = default("constrained")) -> Ask:
    """Ask ``llm`` for the relation of a pair; ``None`` when no reply is readable.

    With ``constrained`` (and a backend that can apply a grammar) the reply is one of the four
    words by construction and ends there: no stop-token step, no retry.
    """
    constraint = RELATION_LABELS if constrained and can_constrain(llm) else None

    def ask(query: Query, a: Atom, b: Atom) -> tuple[RelationKind | None, Usage]:
        usage = Usage()
        prompt = planning.RELATION
        for _ in range(retries + 1):
            messages = prompt.messages(question=query.question or "", a=a.text(), b=b.text())
            if constraint is None:
                reply = chat_reusing_prefix(llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
            else:
                budget = max(
                    prompt.max_tokens, max(len(k) for k in KINDS)
                )  # a word is never cut: a token is at least a byte
                reply = constrained_chat(llm, messages, constraint, stop=prompt.stop, max_tokens=budget)
            usage = usage + reply.usage
            if (kind := parse_kind(reply.text)) is not None:
                return kind, usage
        return None, usage

    return ask


def resolve(
    query: Query, *, ask: Ask | None = None, cache: RelationCache | None = None, undecided: str = "sibling"
) -> Relations:
    """Decide every pair: pinned and inferred first, then the cache, then ``ask``.

    Pairs still undecided (no asker, or an unreadable reply) get ``undecided``.
    """
    table: dict[tuple[str, str], RelationKind] = {}
    source: dict[tuple[str, str], RelationSource] = {}
    pinned = {(r.left, r.right) for r in query.relations} | {(r.right, r.left) for r in query.relations}
    calls = hits = inferred = 0
    usage = Usage()
    for key, kind in infer(query).items():
        if kind is not None:
            table[key], source[key] = kind, (RelationSource.PINNED if key in pinned else RelationSource.INFERRED)
            inferred += key not in pinned
            continue
        a, b = query.atom(key[0]), query.atom(key[1])
        if cache is not None and (cached := cache.get(a, b)) is not None:
            table[key], source[key] = cached, RelationSource.CACHE
            hits += 1
            continue
        answer = None
        if ask is not None:
            answer, spent = ask(query, a, b)
            usage = usage + spent
            calls += spent.calls
            if answer is not None and cache is not None:
                cache.put(a, b, answer)
        if answer is not None:
            table[key], source[key] = RelationKind(answer), RelationSource.LLM
        else:
            table[key], source[key] = RelationKind(undecided), RelationSource.DEFAULT
    pruned = sum(1 for k in table.values() if k == RelationKind.NONE)
    stats = RelationStats(llm_calls=calls, cache_hits=hits, inferred=inferred, pruned_pairs=pruned, usage=usage)
    return Relations(table=table, source=source, stats=stats)

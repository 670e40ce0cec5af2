"""Gold decompositions: the steps a question's annotators wrote, and the tree their references make.

A :class:`Gold` is a question with its gold steps in order. A step's text names the answer of an
earlier step as ``#k`` (1-based), and those references are the dependency edges: the step that
writes ``#k`` is fed by step ``k``, so in a plan the atom of step ``k`` hangs under the atom of the
step that uses it. Steps no other step uses hang under the question itself, as a plan's answer
atoms hang under its root.

>>> gold = Gold.from_steps("What is the seat of the county where Van Hook Township is located?",
...     ["Van Hook Township >> located in the administrative territorial entity", "#1 >> capital"])
>>> gold.edges, gold.depth, gold.chain
(frozenset({(1, 0)}), 2, True)
>>> gold.steps[1].words
'capital'

:func:`load_gold` reads the gold of the shared sets (``../shared/data``): MuSiQue's and StrategyQA's
``decomposition``, and for 2WikiMultiHopQA the shape its question ``type`` defines (the set has no
step texts, so such a gold is ``textual=False``: it is scored on its shape only).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import attrs

from nlqo.common.paths import FILE, dataset_name, found
from nlqo.errors import CorpusError, InputFileError

QUESTION = -1
"""The node of the question itself in a gold tree (steps are ``0 .. n-1``)."""

PARENT_CHILD, SIBLING, NONE = "parent-child", "sibling", "none"
RELATIONS = (NONE, PARENT_CHILD, SIBLING)
"""How two gold steps relate: one feeds the other (``parent-child``), both feed one step or both
answer the question (``sibling``), or neither (``none``, e.g. the two ends of a chain)."""

_REF = re.compile(r"#(\d+)")
_WORD = re.compile(r"[a-z0-9]+")

SHAPES = {
    "comparison": ((), ()),
    "compositional": ((), (1,)),
    "inference": ((), (1,)),
    "bridge_comparison": ((), (), (1,), (2,)),
}
"""2WikiMultiHopQA's question types as steps (each the 1-based steps it uses): a comparison asks one
thing of two entities and compares at the question; compositional and inference questions are
two-hop chains; a bridge comparison is two chains of two, compared at the question."""


def words(text: str) -> tuple[str, ...]:
    """Lower-case runs of letters and digits.

    >>> words("Van Hook Township, N.D.")
    ('van', 'hook', 'township', 'n', 'd')
    """
    return tuple(_WORD.findall(text.lower()))


@attrs.frozen
class GoldStep:
    """One gold step."""

    text: str
    """The step as the set writes it; ``#k`` is the answer of step ``k`` (1-based)."""
    answer: str = ""
    """The gold answer of the step, where the set gives it (never used in scoring)."""

    @property
    def refs(self) -> tuple[int, ...]:
        """The 1-based steps this one uses, in order, without repeats.

        >>> GoldStep("Is #3 smaller than #4 or #3?").refs
        (3, 4)
        """
        return tuple(dict.fromkeys(int(k) for k in _REF.findall(self.text)))

    @property
    def words(self) -> str:
        """The text matched against atoms: references and ``>>`` removed, spaces collapsed.

        >>> GoldStep("#1 >> located in the administrative territorial entity").words
        'located in the administrative territorial entity'
        """
        return " ".join(_REF.sub(" ", self.text).replace(">>", " ").split())


def _tuple(steps: Iterable[GoldStep]) -> tuple[GoldStep, ...]:
    return tuple(steps)


def _check_steps(instance: Gold, attribute: attrs.Attribute, steps: tuple[GoldStep, ...]) -> None:
    if not steps:
        raise ValueError("a gold decomposition needs at least one step")
    for i, step in enumerate(steps, 1):
        bad = [k for k in step.refs if not 1 <= k < i]
        if bad:
            raise ValueError(f"step {i} ({step.text!r}) refers to #{bad[0]}: a step may use only earlier steps")


@attrs.frozen
class Gold:
    """A question's gold decomposition: its steps, and the dependency edges their references make."""

    question: str
    steps: tuple[GoldStep, ...] = attrs.field(converter=_tuple, validator=_check_steps)
    id: str = ""
    dataset: str = ""
    """The set it comes from (the file name without ``.jsonl.gz``)."""
    kind: str = ""
    """The set's question type (MuSiQue ``2hop``, ``3hop1``, ...; 2Wiki ``comparison``, ...)."""
    textual: bool = True
    """False when the steps stand for a shape only (2Wiki): no atom is matched against them."""

    @classmethod
    def from_steps(cls, question: str, texts: Sequence[str], **fields: Any) -> Gold:
        """A gold from step texts that refer to earlier steps as ``#k``."""
        return cls(question, tuple(GoldStep(t) for t in texts), **fields)

    @property
    def hops(self) -> int:
        return len(self.steps)

    @functools.cached_property
    def edges(self) -> frozenset[tuple[int, int]]:
        """``(parent, child)`` step indices (0-based): the parent's text uses the child's answer."""
        return frozenset((i, k - 1) for i, step in enumerate(self.steps) for k in step.refs)

    @functools.cached_property
    def parent(self) -> Mapping[int, int]:
        """Each step's parent in the gold tree: the first step that uses it, else :data:`QUESTION`.

        A step two later steps use (StrategyQA has a few) makes the edges a DAG; the tree keeps it
        under the first, and :attr:`edges` keeps both.
        """
        first: dict[int, int] = {}
        for parent, child in sorted(self.edges):
            first.setdefault(child, parent)
        return {i: first.get(i, QUESTION) for i in range(len(self.steps))}

    @functools.cached_property
    def children(self) -> Mapping[int, tuple[int, ...]]:
        kids: dict[int, list[int]] = {n: [] for n in (QUESTION, *range(len(self.steps)))}
        for child, parent in self.parent.items():
            kids[parent].append(child)
        return {n: tuple(sorted(c)) for n, c in kids.items()}

    @property
    def depth(self) -> int:
        """Edges on the longest path from the question down (a plan's ``depth``)."""
        return height(self.children, QUESTION)

    @property
    def chain(self) -> bool:
        """Whether the tree is a path: no node, the question included, has two children."""
        return is_chain(self.children)

    @property
    def shape(self) -> str:
        """The tree's canonical form (:func:`canonical`): equal for isomorphic trees."""
        return canonical(self.children, QUESTION)

    def relation(self, a: int, b: int) -> str:
        """How steps ``a`` and ``b`` relate (:data:`RELATIONS`), from all the edges.

        >>> g = Gold.from_steps("q", ["A", "B", "#1 vs #2"])
        >>> g.relation(0, 2), g.relation(0, 1), Gold.from_steps("q", ["A", "#1", "#2"]).relation(0, 2)
        ('parent-child', 'sibling', 'none')
        """
        if (a, b) in self.edges or (b, a) in self.edges:
            return PARENT_CHILD
        parents_a = {p for p, c in self.edges if c == a} or {QUESTION}
        parents_b = {p for p, c in self.edges if c == b} or {QUESTION}
        return SIBLING if parents_a & parents_b else NONE

    def pairs(self) -> Iterator[tuple[int, int, str]]:
        """Every pair of steps ``a < b`` with its relation."""
        for a in range(len(self.steps)):
            for b in range(a + 1, len(self.steps)):
                yield a, b, self.relation(a, b)


def height(children: Mapping[Any, Sequence[Any]], root: Any) -> int:
    """Edges on the longest path down from ``root`` (iterative: chains of any length).

    >>> height({0: (1,), 1: (2,), 2: ()}, 0), height({0: ()}, 0)
    (2, 0)
    """
    best, stack = 0, [(root, 0)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in children.get(node, ()))
    return best


def is_chain(children: Mapping[Any, Sequence[Any]]) -> bool:
    """No node has two children.

    >>> is_chain({0: (1,), 1: ()}), is_chain({0: (1, 2), 1: (), 2: ()})
    (True, False)
    """
    return all(len(kids) <= 1 for kids in children.values())


def canonical(children: Mapping[Any, Sequence[Any]], root: Any) -> str:
    """A string that two rooted unordered trees share exactly when they are isomorphic (AHU).

    >>> canonical({0: (1, 2), 1: (3,), 2: (), 3: ()}, 0) == canonical({9: (7, 8), 7: (), 8: (6,), 6: ()}, 9)
    True
    >>> canonical({0: (1,), 1: (2,), 2: ()}, 0)
    '((()))'
    """
    order = [n for n, _ in _walk(children, root)]
    form: dict[Any, str] = {}
    for node in reversed(order):
        form[node] = "(" + "".join(sorted(form[c] for c in children.get(node, ()))) + ")"
    return form[root]


def _walk(children: Mapping[Any, Sequence[Any]], root: Any) -> Iterator[tuple[Any, int]]:
    stack = [(root, 0)]
    while stack:
        node, d = stack.pop()
        yield node, d
        stack.extend((c, d + 1) for c in children.get(node, ()))


def gold_of(record: Mapping[str, Any], dataset: str = "") -> Gold | None:
    """The gold of one record of the shared sets, or None when it has none (HotpotQA, an unknown 2Wiki type).

    MuSiQue's ``decomposition`` is a list of ``{"question", "answer", ...}`` whose questions read
    ``Van Hook Township >> located in ...`` or are plain sub-questions; StrategyQA's is a list of
    sub-questions. In a set whose name says 2Wiki (``dataset``), the ``type`` is a shape
    (:data:`SHAPES`), with the supporting titles as placeholder texts.

    >>> gold_of({"id": "x", "question": "Who is older, A or B?", "type": "comparison",
    ...          "supporting_facts": [["A", 0], ["B", 0]]}, "2wiki_dev_300").steps[1].text
    'B'
    """
    question, rid, kind = str(record["question"]), str(record.get("id", "")), str(record.get("type") or "")
    decomposition = record.get("decomposition")
    if decomposition:
        steps = tuple(
            GoldStep(str(d["question"]), str(d.get("answer", ""))) if isinstance(d, Mapping) else GoldStep(str(d))
            for d in decomposition
        )
        return Gold(question, steps, id=rid, dataset=dataset, kind=kind)
    shape = SHAPES.get(kind) if "2wiki" in dataset.lower() else None
    if shape is None:
        return None
    titles = list(dict.fromkeys(str(fact[0]) for fact in record.get("supporting_facts") or ()))
    firsts = [i for i, refs in enumerate(shape) if not refs]
    texts = [" ".join(f"#{k}" for k in refs) for refs in shape]
    for n, i in enumerate(firsts):
        texts[i] = titles[n] if n < len(titles) else f"entity {n + 1}"
    return Gold(question, tuple(GoldStep(t) for t in texts), id=rid, dataset=dataset, kind=kind, textual=False)


def load_gold(path: str | Path, *, limit: int | None = None) -> tuple[Gold, ...]:
    """The golds of a question file of the shared sets (JSON Lines, optionally gzipped), in file
    order; records without one are skipped, and ``limit`` counts records read. A bad record is a
    :class:`~nlqo.errors.CorpusError` naming the file and line."""
    path = Path(path)
    dataset = dataset_name(path)
    opener = gzip.open if path.suffix == ".gz" else open
    out: list[Gold] = []
    read = 0
    if found(path) != FILE:
        raise InputFileError(f"{path}: expected a question file (.jsonl or .jsonl.gz), found {found(path)}")
    with opener(path, "rt", encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if limit is not None and read >= limit:
                break
            read += 1
            try:
                gold = gold_of(json.loads(line), dataset)
            except (ValueError, KeyError, TypeError) as exc:
                raise CorpusError(f"not a gold record: {exc}", path=str(path), line=line_no) from exc
            if gold is not None:
                out.append(gold)
    return tuple(out)

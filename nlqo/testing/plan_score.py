"""How close a plan comes to a gold decomposition: :func:`plan_score`.

The plan's atoms are matched to the gold steps first, then the structure is compared through that
matching. **The matching rule**: every (atom, step) pair gets a score

    score = similarity + entity_weight * entity overlap

where the similarity is the embedder's cosine of the atom's words and the step's words, the better
of two readings of the atom: its constants and predicate alone (``Van Hook Township located in``),
and with its variables as plain words (``Van Hook Township located in county``, as the cost
model's ``similarity`` reads atoms; variables are labels the parser chose, sometimes telling, often
not). A step's words are its text without ``#k`` references and ``>>``. The entity overlap is the share of the content words of the atom's subject and object constants that
the step's text contains (0 for an atom that names no entity). Pairs scoring at least
``threshold`` are matched greedily, best score first, each atom and each step at most once: a
greedy bipartite matching. Among equal scores a pair whose words are the same comes first, then
the pair whose positions (the atom's in the plan, the step's in the gold) are closest, then the
earlier atom.

From the matching:

* atom **precision** (PlanRAG's atomic query generation accuracy): matched atoms / plan atoms;
  atom **recall** (PlanRAG's atom coverage): matched steps / gold steps;
* **edges found**: gold dependency edges (``#k`` references) whose two steps are matched to atoms
  the plan puts parent over child; what the plan made of every gold edge is in ``edge_outcomes``
  (``parent-child``, ``reversed``, ``sibling``, ``none``, or ``unmatched``);
* **relation accuracy** per gold class (none, parent-child, sibling; PlanRAG's relation
  classification accuracy) over the pairs of matched steps: the relation the plan puts their atoms
  in (one the parent of the other, in the gold's direction; both under one node; neither);

and from the trees alone: depth and shape (isomorphism) against the gold's, whether the plan is a
chain where the gold is not (**linear degeneration**), and the leaves that name no entity.

>>> from nlqo.testing.gold import Gold
>>> gold = Gold.from_steps("What is the seat of the county where Van Hook Township is located?",
...     ["Van Hook Township >> located in the administrative territorial entity", "#1 >> capital"])
>>> score = plan_score(gold_plan(gold), gold)
>>> score.precision, score.recall, score.edge_recall, score.shape_match, score.overall
(1.0, 1.0, 1.0, True, 1.0)
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import attrs
import numpy as np

from nlqo.common.passages import Embedder
from nlqo.ir import Atom, Const, Query, Relation, Var
from nlqo.kinds import RelationKind
from nlqo.optimizer.plan import ROOT, Cost, Plan, Tree
from nlqo.testing.fakes import HashEmbedder
from nlqo.testing.gold import (
    NONE,
    PARENT_CHILD,
    RELATIONS,
    SIBLING,
    Gold,
    GoldStep,
    canonical,
    height,
    is_chain,
    words,
)

THRESHOLD = 0.5
"""Least matching score of an (atom, step) pair (set for all-MiniLM-L6-v2's cosines)."""
ENTITY_WEIGHT = 0.25
"""Weight of the entity overlap in the matching score."""
REVERSED, UNMATCHED = "reversed", "unmatched"
OUTCOMES = (PARENT_CHILD, REVERSED, SIBLING, NONE, UNMATCHED)
"""What the plan made of a gold edge."""

_STOP = frozenset(
    "the and for was were who what which with from that this are has had did does its his her their "
    "into than then there when where whom whose of in on at to by an a is".split()
)


def atom_words(atom: Atom) -> str:
    """The words of an atom that are matched: its constants and predicate, variables left out.

    >>> atom_words(Atom("q1", Const("Van Hook Township"), Const("located in"), Var("county")))
    'Van Hook Township located in'
    """
    return " ".join(" ".join(t.text for t in atom.terms if isinstance(t, Const)).split())


def atom_text(atom: Atom) -> str:
    """An atom with its variables as plain words (the reading of :func:`nlqo.optimizer.plan.textualise`).

    >>> atom_text(Atom("q1", Const("Van Hook Township"), Const("located in"), Var("county")))
    'Van Hook Township located in county'
    """
    return " ".join(" ".join(t.name if isinstance(t, Var) else t.text for t in atom.terms).split())


def entities(atom: Atom) -> tuple[str, ...]:
    """The entities an atom names: its subject and object constants."""
    return tuple(t.text for t in (atom.subject, atom.object) if isinstance(t, Const))


def _content(text: str) -> set[str]:
    return {w for w in words(text) if len(w) > 1 and w not in _STOP}


def entity_overlap(atom: Atom, step_words: str) -> float:
    """Share of the content words of the atom's entities that the step's text contains.

    >>> entity_overlap(Atom("q1", Const("Van Hook Township"), Const("in"), Var("c")), "Van Hook Township >> located in")
    1.0
    >>> entity_overlap(Atom("q1", Var("c"), Const("capital"), Var("s")), "capital")
    0.0
    """
    named = set().union(*(_content(e) for e in entities(atom))) if entities(atom) else set()
    return len(named & _content(step_words)) / len(named) if named else 0.0


@attrs.frozen
class Match:
    """An atom matched to a gold step."""

    atom: str
    step: int
    """The step's index (0-based: step ``#k`` is ``k - 1``)."""
    similarity: float
    overlap: float
    score: float


@attrs.frozen
class PlanScore:
    """A plan against a gold decomposition: the counts every figure is made of, and the figures.

    A figure with nothing to measure is None: precision of a plan with no atom, edges found of a
    one-step gold, the matching figures of a gold that is a shape only (``textual`` false), linear
    degeneration where the gold is itself a chain.
    """

    gold: Gold = attrs.field(repr=False)
    planned: bool
    """False when there was no plan (the parse or the planning failed): everything counts as missed."""
    matches: tuple[Match, ...]
    atoms: int
    """Atoms in the plan's tree."""
    leaves: int
    bare_leaves: tuple[str, ...]
    """Leaves whose atom names no entity (no constant subject or object)."""
    edge_outcomes: Mapping[str, int]
    """What the plan made of the gold edges, by :data:`OUTCOMES`."""
    confusion: Mapping[str, Mapping[str, int]]
    """Pairs of matched steps: gold relation -> the plan's relation -> count."""
    depth: int
    chain: bool
    shape: str

    @property
    def steps(self) -> int:
        return self.gold.hops

    @property
    def matched(self) -> int:
        return len(self.matches)

    @property
    def precision(self) -> float | None:
        """Matched atoms / plan atoms (None: no atom, or a shape-only gold)."""
        return self.matched / self.atoms if self.atoms and self.gold.textual else None

    @property
    def recall(self) -> float | None:
        """Matched gold steps / gold steps (None: a shape-only gold)."""
        return self.matched / self.steps if self.gold.textual else None

    @property
    def f1(self) -> float | None:
        if not self.gold.textual:
            return None
        p, r = self.precision or 0.0, self.recall or 0.0
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def gold_edges(self) -> int:
        return len(self.gold.edges)

    @property
    def edges_found(self) -> int:
        return self.edge_outcomes.get(PARENT_CHILD, 0)

    @property
    def edge_recall(self) -> float | None:
        """Gold edges the plan has as parent over child (None: no edge, or a shape-only gold)."""
        return self.edges_found / self.gold_edges if self.gold_edges and self.gold.textual else None

    def relation_counts(self, kind: str | None = None) -> tuple[int, int]:
        """(right, pairs) over the pairs of matched steps whose gold relation is ``kind`` (None: all)."""
        kinds = RELATIONS if kind is None else (kind,)
        right = sum(self.confusion.get(k, {}).get(k, 0) for k in kinds)
        total = sum(sum(self.confusion.get(k, {}).values()) for k in kinds)
        return right, total

    def relation_accuracy(self, kind: str | None = None) -> float | None:
        """Share of matched step pairs of gold relation ``kind`` (None: all) the plan relates the same way."""
        right, total = self.relation_counts(kind)
        return right / total if total else None

    @property
    def gold_depth(self) -> int:
        return self.gold.depth

    @property
    def depth_match(self) -> bool:
        return self.planned and self.depth == self.gold_depth

    @property
    def depth_agreement(self) -> float:
        """1 when the depths agree, down to 0 at a difference as large as the gold's depth."""
        if not self.planned:
            return 0.0
        return max(0.0, 1.0 - abs(self.depth - self.gold_depth) / max(self.gold_depth, 1))

    @property
    def shape_match(self) -> bool:
        """The plan's tree is isomorphic to the gold's."""
        return self.planned and self.shape == self.gold.shape

    @property
    def linear_degeneration(self) -> bool | None:
        """The plan is a chain where the gold is not (None: the gold is a chain, or there is no plan)."""
        return None if self.gold.chain or not self.planned else self.chain

    @property
    def bare_leaf_share(self) -> float | None:
        return len(self.bare_leaves) / self.leaves if self.leaves else None

    @property
    def overall(self) -> float:
        """One number in [0, 1]: the mean of the figures this gold defines among atom F1, edges
        found, relation accuracy (all pairs), shape match and depth agreement."""
        parts = [self.f1, self.edge_recall, self.relation_accuracy(), float(self.shape_match), self.depth_agreement]
        defined = [p for p in parts if p is not None]
        return sum(defined) / len(defined)

    def figures(self) -> dict[str, Any]:
        """Every figure by name (None where undefined), for records and assertions."""
        return {
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "edge_recall": self.edge_recall,
            **{f"relation_{k}": self.relation_accuracy(k) for k in RELATIONS},
            "relation_all": self.relation_accuracy(),
            "depth_match": self.depth_match,
            "depth_agreement": self.depth_agreement,
            "shape_match": self.shape_match,
            "linear_degeneration": self.linear_degeneration,
            "bare_leaf_share": self.bare_leaf_share,
            "overall": self.overall,
        }


def plan_score(
    plan: Plan | None,
    gold: Gold,
    *,
    embedder: Embedder | None = None,
    threshold: float = THRESHOLD,
    entity_weight: float = ENTITY_WEIGHT,
) -> PlanScore:
    """Score ``plan`` against ``gold`` (``None``: no plan was made; every step counts as missed).

    ``embedder`` embeds the texts the matching compares (default: the kit's :class:`HashEmbedder`,
    hashed words, no model; the benchmark uses all-MiniLM-L6-v2, for which ``threshold`` is set).
    Deterministic for a deterministic embedder.
    """
    if plan is None:
        empty = {k: 0 for k in OUTCOMES} | {UNMATCHED: len(gold.edges)}
        return PlanScore(gold, False, (), 0, 0, (), empty, {}, 0, False, "")
    parent = dict(plan.tree.parent)
    atoms = [plan.query.atom(n) for n in plan.tree.order if n != ROOT]
    matches = match(atoms, gold, embedder or HashEmbedder(), threshold, entity_weight) if gold.textual else ()
    at = {m.step: m.atom for m in matches}
    outcomes = {k: 0 for k in OUTCOMES}
    for p, c in sorted(gold.edges):
        outcomes[_related(parent, at[p], at[c]) if p in at and c in at else UNMATCHED] += 1
    confusion: dict[str, dict[str, int]] = {}
    for a, b, kind in gold.pairs():
        if a in at and b in at:
            up, down = (a, b) if (a, b) in gold.edges or kind != PARENT_CHILD else (b, a)
            seen = _related(parent, at[up], at[down])
            if kind != PARENT_CHILD and seen == REVERSED:
                seen = PARENT_CHILD
            row = confusion.setdefault(kind, {})
            row[seen] = row.get(seen, 0) + 1
    children = plan.tree.children
    leaves = [a for a in atoms if not children[a.id]]
    return PlanScore(
        gold=gold,
        planned=True,
        matches=matches,
        atoms=len(atoms),
        leaves=len(leaves),
        bare_leaves=tuple(a.id for a in leaves if not entities(a)),
        edge_outcomes=outcomes,
        confusion=confusion,
        depth=height(children, ROOT),
        chain=is_chain(children),
        shape=canonical(children, ROOT),
    )


def _related(parent: Mapping[str, str], up: str, down: str) -> str:
    """How the plan relates ``up`` (the gold's parent, for an edge) and ``down``."""
    if parent.get(down) == up:
        return PARENT_CHILD
    if parent.get(up) == down:
        return REVERSED
    return SIBLING if parent.get(up) == parent.get(down) else NONE


def match(
    atoms: Sequence[Atom], gold: Gold, embedder: Embedder, threshold: float, entity_weight: float
) -> tuple[Match, ...]:
    """The greedy bipartite matching of the module's rule, in step order."""
    texts = [atom_words(a) for a in atoms]
    named = [atom_text(a) for a in atoms]
    steps = [s.words for s in gold.steps]
    if not atoms:
        return ()
    unique = list(dict.fromkeys(texts + named + steps))
    vectors = np.asarray(embedder.encode(unique), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms == 0, 1, norms)
    row = {t: i for i, t in enumerate(unique)}
    columns = vectors[[row[t] for t in steps]].T
    sims = np.maximum(vectors[[row[t] for t in texts]] @ columns, vectors[[row[t] for t in named]] @ columns)
    sims = np.round(sims, 9)  # BLAS may sum one row differently from an equal one: equal texts must tie exactly
    candidates = []
    for i, atom in enumerate(atoms):
        for j, step in enumerate(steps):
            overlap = entity_overlap(atom, step)
            score = float(sims[i, j]) + entity_weight * overlap
            if score >= threshold:
                candidates.append((-score, texts[i] != step, abs(i - j), i, j, float(sims[i, j]), overlap))
    candidates.sort()
    used_atoms: set[int] = set()
    used_steps: set[int] = set()
    found = []
    for neg, _, _, i, j, similarity, overlap in candidates:
        if i in used_atoms or j in used_steps:
            continue
        used_atoms.add(i)
        used_steps.add(j)
        found.append(Match(atoms[i].id, j, round(similarity, 6), round(overlap, 6), round(-neg, 6)))
    return tuple(sorted(found, key=lambda m: m.step))


def gold_plan(gold: Gold) -> Plan:
    """The plan that is the gold: one atom per step (``s1``, ``s2``, ...) whose words are the step's,
    hung as the gold tree hangs the steps. A ``Entity >> relation`` step becomes
    ``("Entity", "relation", ?sK)``; any other ``(?sK, "its words", ?sK)``. Where the gold's edges
    are a tree, :func:`plan_score` gives this plan 1.0 on every figure. Its query pins each tree
    edge (``relation sJ parent sK``) and answers with the top steps, so the optimizer plans it into
    the same tree again, under any cost model.

    >>> gold_plan(Gold.from_steps("q", ["Jaws >> director", "#1 >> born in"])).tree.parent
    (('s1', 's2'), ('s2', '$root'))
    """
    atoms = []
    for i, step in enumerate(gold.steps, 1):
        entity, arrow, rest = step.text.partition(">>")
        var = Var(f"s{i}")
        if arrow and entity.strip() and not GoldStep(entity).refs:
            atoms.append(Atom(f"s{i}", Const(" ".join(entity.split())), Const(GoldStep(rest).words), var))
        else:
            atoms.append(Atom(f"s{i}", var, Const(step.words), var))
    ids = tuple(a.id for a in atoms)
    roots = tuple(f"s{i + 1}" for i, p in gold.parent.items() if p < 0)
    parent = {f"s{c + 1}": (ROOT if p < 0 else f"s{p + 1}") for c, p in gold.parent.items()}
    pins = tuple(Relation(p, RelationKind.PARENT, c) for c, p in parent.items() if p != ROOT)
    query = Query(atoms=tuple(atoms), answer=roots, question=gold.question, relations=pins)
    return Plan(query=query, tree=Tree.build(ROOT, parent, (ROOT, *ids)), cost=Cost(0.0, {}))

"""Hypothesis strategies for IR queries, cost models and plans.

>>> from hypothesis import given, settings
>>> from nlqo.testing import check_plan
>>> @settings(max_examples=5, deadline=None)
... @given(plans())
... def test_plans_keep_their_invariants(plan):
...     check_plan(plan)
>>> test_plans_keep_their_invariants()
"""

from __future__ import annotations

from typing import Any, Sequence

from hypothesis import strategies as st

from nlqo.optimizer.cost import CostModel, load_cost_model
from nlqo.errors import IRSemanticError
from nlqo.ir import Atom, Const, Query, Relation, Var
from nlqo.kinds import PINNABLE, RelationKind
from nlqo.runtime.llm.base import ChatMessage, Completion, Usage
from nlqo.ir.pins import check_pins
from nlqo.optimizer.plan import Plan

var_names = st.sampled_from(["a", "b", "c", "d", "e", "x1", "band", "Drummer"])
const_texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), min_size=0, max_size=12
)
terms = st.one_of(var_names.map(Var), const_texts.map(Const))


@st.composite
def pins(draw: Any, ids: Sequence[str], max_pins: int = 2, keep_on_top: Sequence[str] = ()) -> tuple[Relation, ...]:
    """Pinned relations among ``ids`` that describe a tree (no cycle, one parent each, no
    contradiction) and pin none of ``keep_on_top`` (the atoms holding the answer) under another."""
    out: list[Relation] = []
    if len(ids) < 2:
        return ()
    for _ in range(draw(st.integers(0, max_pins))):
        a, b = draw(st.sampled_from(ids)), draw(st.sampled_from(ids))
        kind = draw(st.sampled_from(PINNABLE))
        if a == b or (kind == RelationKind.PARENT and b in keep_on_top):
            continue
        candidate = Relation(a, kind, b)
        try:
            check_pins([*out, candidate])
        except IRSemanticError:
            continue
        out.append(candidate)
    return tuple(out)


@st.composite
def queries(draw: Any, max_atoms: int = 6, relations: bool = True) -> Query:
    """Valid queries: each atom has at least one variable, the answer is mentioned, pins are consistent."""
    n = draw(st.integers(1, max_atoms))
    atoms = []
    for i in range(n):
        s, p, o = draw(terms), draw(st.one_of(const_texts.map(Const), var_names.map(Var))), draw(terms)
        if not any(isinstance(t, Var) for t in (s, p, o)):
            s = Var(draw(var_names))
        atoms.append(Atom(f"q{i + 1}", s, p, o))
    mentioned = sorted({v for a in atoms for v in a.variables})
    answer: Var | str = Var(draw(st.sampled_from(mentioned)))
    if draw(st.booleans()) and n > 1:
        answer = draw(st.sampled_from([a.id for a in atoms]))
    holders = [a.id for a in atoms if a.id == answer or (isinstance(answer, Var) and answer.name in a.variables)]
    rels = draw(pins([a.id for a in atoms], keep_on_top=holders)) if relations else ()
    question = draw(st.one_of(st.none(), const_texts))
    return Query(atoms=tuple(atoms), answer=answer, question=question, relations=rels)


def chain(n: int) -> Query:
    """``n`` atoms in a line: ``q1`` holds the answer, each later atom shares a variable with the one before."""
    atoms = tuple(
        Atom(f"q{i + 1}", Var(f"v{i}"), Const(f"p{i}"), Var(f"v{i + 1}") if i + 1 < n else Const("end"))
        for i in range(n)
    )
    return Query(atoms=atoms, answer=Var("v0"), question=f"a chain of {n}")


def star(n: int) -> Query:
    """``n`` atoms that all mention the answer variable (one hub, every pair undecided)."""
    atoms = tuple(Atom(f"q{i + 1}", Var("hub"), Const(f"p{i}"), Const(f"o{i}")) for i in range(n))
    return Query(atoms=atoms, answer=Var("hub"), question=f"a star of {n}")


@st.composite
def chains(draw: Any, min_atoms: int = 1, max_atoms: int = 8) -> Query:
    return chain(draw(st.integers(min_atoms, max_atoms)))


@st.composite
def stars(draw: Any, min_atoms: int = 1, max_atoms: int = 8) -> Query:
    return star(draw(st.integers(min_atoms, max_atoms)))


@st.composite
def comparisons(draw: Any, max_branch: int = 3) -> Query:
    """A comparison atom over two branches (chains) that meet it only through pinned ``parent`` relations."""
    atoms = [Atom("cmp", Var("first"), Const("came before"), Var("other"))]
    rels = []
    for side in ("a", "b"):
        length = draw(st.integers(1, max_branch))
        for i in range(length):
            nxt = Var(f"{side}{i + 1}") if i + 1 < length else Const(f"{side}-entity")
            atoms.append(Atom(f"{side}{i + 1}", Var(f"{side}{i}"), Const(f"{side} step {i}"), nxt))
        rels.append(Relation("cmp", RelationKind.PARENT, f"{side}1"))
    return Query(atoms=tuple(atoms), answer=Var("first"), question="which came first?", relations=tuple(rels))


_STRUCTURAL = ("depth", "imbalance", "size", "edges", "leaves")


@st.composite
def cost_models(draw: Any) -> CostModel:
    """Cost models over the structural metrics: a weighted sum (any signs), sometimes with an
    ``abs`` or ``max`` term that moves both ways. The optimizer must be exact on every one."""
    weights = st.sampled_from([-2, -1, -0.5, 0, 0.5, 1, 3])
    parts = [f"{draw(weights)} * {m}" for m in _STRUCTURAL]
    if draw(st.booleans()):
        parts.append(f"{draw(weights)} * abs({draw(st.sampled_from(_STRUCTURAL))} - {draw(st.integers(0, 4))})")
    if draw(st.booleans()):
        parts.append(f"max({draw(st.sampled_from(_STRUCTURAL))}, {draw(st.integers(0, 3))})")
    text = "cost = " + " + ".join(parts)
    return CostModel.parse(text, name="drawn", source=text)


class PairLLM:
    """A deterministic stand-in for the LLM's answer about an undecided atom pair, varied by ``seed``."""

    name = "pairs"

    def __init__(self, query: Query, seed: int):
        self.kinds = {a.text(): a for a in query.atoms}
        self.seed = seed

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 8) -> Completion:
        return Completion("sibling", Usage(calls=1))

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 8) -> Completion:
        text = messages[-1].content
        a = text.split("\nA: ")[1].split("\n")[0]
        b = text.split("\nB: ")[1].split("\n")[0]
        kinds = RelationKind.values()
        return Completion(kinds[(sum(map(ord, a + b)) + self.seed) % len(kinds)], Usage(calls=1))


def plan(query: Query, *, cost_model: CostModel | None = None, seed: int | None = 0, **options: Any) -> Plan:
    """Plan ``query`` without rewrite rules; undecided pairs go to :class:`PairLLM` (``seed``), or default to siblings (``None``)."""
    from nlqo.optimizer.optimizer import Optimizer

    llm = PairLLM(query, seed) if seed is not None else None
    return Optimizer(cost_model=cost_model or load_cost_model("structural"), rules=(), llm=llm, **options).optimize(
        query
    )


_any_query = queries


@st.composite
def plans(draw: Any, queries: Any = None, cost_models: Any = None) -> Plan:
    """Plans of drawn queries (default: :func:`queries` up to 6 atoms) under drawn cost models (default: structural)."""
    query = draw(queries if queries is not None else _any_query(max_atoms=6))
    model = draw(cost_models) if cost_models is not None else None
    return plan(query, cost_model=model, seed=draw(st.integers(0, 3)))

"""Hypothesis strategies for IR values and queries, and plans made from them, in one place."""

from __future__ import annotations

from hypothesis import strategies as st

from nlqo.ir import Atom, Const, Query, Relation, Var
from nlqo.relations import KINDS

var_names = st.sampled_from(["a", "b", "c", "d", "e", "x1", "band", "Drummer"])
const_texts = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), min_size=0, max_size=12
)
terms = st.one_of(var_names.map(Var), const_texts.map(Const))


@st.composite
def queries(draw, max_atoms: int = 6, relations: bool = True) -> Query:
    """Valid queries: each atom has at least one variable, and the answer variable is mentioned."""
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
    rels: list[Relation] = []
    if relations and n > 1:
        ids = [a.id for a in atoms]
        for _ in range(draw(st.integers(0, 2))):
            a, b = draw(st.sampled_from(ids)), draw(st.sampled_from(ids))
            if a != b and all({r.left, r.right} != {a, b} for r in rels):
                rels.append(Relation(a, draw(st.sampled_from(("parent", "sibling", "none"))), b))
    question = draw(st.one_of(st.none(), const_texts))
    return Query(atoms=tuple(atoms), answer=answer, question=question, relations=tuple(rels))


def asker(seed: int):
    """A deterministic stand-in for the LLM's pair classification, varied by ``seed``."""
    from nlqo.llm.base import Usage

    def ask(query, a, b):
        kind = KINDS[(hash((a.id, b.id)) * 0 + sum(map(ord, a.id + b.id)) + seed) % len(KINDS)]
        return kind, Usage(calls=1)

    return ask


def plan_with(query, seed, **kw):
    """Plan ``query`` on the structural cost model, a deterministic pair classifier (varied by
    ``seed``) standing in for the LLM."""
    from nlqo.cost import load_cost_model
    from nlqo.llm.base import Completion, Usage
    from nlqo.optimizer import Optimizer

    ask = asker(seed)

    class PairLLM:
        name = "pairs"

        def chat(self, messages, *, stop=(), max_tokens=8):
            text = messages[-1].content
            a = text.split("\nA: ")[1].split("\n")[0]
            b = text.split("\nB: ")[1].split("\n")[0]
            ida = next(x.id for x in query.atoms if x.text() == a)
            idb = next(x.id for x in query.atoms if x.text() == b and x.id != ida)
            kind, _ = ask(query, query.atom(ida), query.atom(idb))
            return Completion(kind, Usage(calls=1))

    return Optimizer(cost_model=load_cost_model("structural"), rules=(), llm=PairLLM(), **kw).optimize(query)

"""The parallel tree operator (PlanRAG): execute a logical query tree bottom-up.

Leaves rewrite their atom into a question, retrieve and answer. An inner node gathers its
children's questions and answers, rewrites its own atom with them, retrieves and answers. With
``queries="substitute"`` a node's question is instead its atom with the children's answers put in
place of their variables, retrieved as it is, and the LLM rewrites only where that fails. The root
(the question itself) answers the main question from its children's answers. A node starts only
when all its children have finished; ready nodes run concurrently on a thread pool.
"""

from __future__ import annotations

import contextvars
import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import attrs

from nlqo.execution.answers import short_answer, visible
from nlqo.config import TREE_QUERIES, default
from nlqo.execution.trace import PassageRef, RunResult, Step, Trace
from nlqo.kinds import Operator, StopReason
from nlqo.ir import Atom, Const, Query, Var
from nlqo.runtime.llm.base import LLM, capabilities, chat_reusing_prefix
from nlqo.common.passages import Hit, Retriever
from nlqo.optimizer.plan import ROOT, Plan
from nlqo.runtime.prompts import execution


@attrs.frozen
class NodeResult:
    node: str
    question: str
    answer: str
    passages: tuple[PassageRef, ...]


def _words(text: str) -> list[str]:
    """Lower-case words, for comparing two questions.

    >>> _words("Who directed Jaws?") == _words("who directed  jaws")
    True
    """
    return re.findall(r"\w+", text.lower())


def substitute(query: Query, node: str, children: list[NodeResult]) -> Atom | None:
    """``node``'s atom with each child's answer put in place of the one variable the two share, or
    ``None`` when some child's answer cannot be placed (no single shared variable, or no answer).

    >>> from nlqo.ir.syntax import parse
    >>> q = parse('q1 = (?d, "directed", "Jaws")\\nq2 = (?d, "born in", ?city)\\nanswer ?city')
    >>> kid = NodeResult("q1", "?d directed Jaws", "Steven Spielberg", ())
    >>> substitute(q, "q2", [kid]).text(), substitute(q, "q1", []).text()
    ('Steven Spielberg born in ?city', '?d directed Jaws')
    >>> substitute(q, "q2", [attrs.evolve(kid, answer="")]) is None
    True
    """
    atom = query.atom(node)
    values: dict[str, str] = {}
    for child in children:
        shared = query.atom(child.node).variables & atom.variables if child.node in query.ids else frozenset()
        if len(shared) != 1 or not child.answer:
            return None
        values[next(iter(shared))] = child.answer
    terms = [Const(values[t.name]) if isinstance(t, Var) and t.name in values else t for t in atom.terms]
    return Atom(atom.id, *terms)


def fill_question(atom: Atom, target: str | None) -> str:
    """The question a substituted atom asks: the value of ``target`` (or its first variable).

    >>> from nlqo.ir import Var, Const
    >>> fill_question(Atom("q2", Const("Steven Spielberg"), Const("born in"), Var("city")), "city")
    'What is ?city in: Steven Spielberg born in ?city?'
    >>> fill_question(Atom("q1", Const("Jaws"), Const("released in"), Const("1975")), None)
    'Is it true that Jaws released in 1975?'
    """
    names = [t.name for t in atom.terms if isinstance(t, Var)]
    if not names:
        return f"Is it true that {atom.text()}?"
    name = target if target in names else names[0]
    return f"What is ?{name} in: {atom.text()}?"


def search_text(atom: Atom) -> str:
    """A substituted atom as a retrieval query: variables by their names, as words.

    >>> from nlqo.ir import Var, Const
    >>> search_text(Atom("q2", Const("Steven Spielberg"), Const("born in"), Var("city")))
    'Steven Spielberg born in city'
    """
    return " ".join(t.name.replace("_", " ") if isinstance(t, Var) else t.text for t in atom.terms)


def default_workers(plan: Plan, concurrency: int = 1) -> int:
    """The widest wave of ready nodes, capped by the larger of the CPU count and the backend's
    ``concurrency`` (requests it decodes together, e.g. llama.cpp's batched slots)."""
    widest = max(len(level) for level in plan.tree.levels())
    return max(1, min(max(os.cpu_count() or 1, concurrency), widest))


@attrs.define(eq=False)
class TreeExecutor:
    llm: LLM
    retriever: Retriever
    k: int = default("k")
    workers: int | None = None
    """Concurrent nodes; default :func:`default_workers`. ``parallel=False`` forces one."""
    parallel: bool = default("parallel")
    guard_rewrites: bool = default("guard_rewrites")
    """Replace a rewrite that only repeats the main question by the node's own atom (retrieving with
    the atom and its children's answers): small models often copy the main question."""
    queries: str = attrs.field(default=default("tree_queries"), validator=attrs.validators.in_(TREE_QUERIES))
    """``rewrite``: the LLM writes each node's question; ``substitute``: the children's answers are
    put into the atom (:func:`substitute`) and the LLM rewrites only where that fails."""

    def run(self, plan: Plan, *, trace: Trace | None = None, strategy: str = Operator.TREE.value) -> RunResult:
        trace = trace or Trace()
        started = time.perf_counter()
        tree = plan.tree
        workers = (
            1 if not self.parallel else (self.workers or default_workers(plan, capabilities(self.llm).concurrency))
        )
        results: dict[str, NodeResult] = {}
        waiting = {n: set(tree.children[n]) for n in tree.nodes}
        running: dict[Future, str] = {}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nlqo-node") as pool:

            def submit_ready() -> None:
                for n in tree.nodes:
                    if not waiting[n] and n not in results and n not in running.values():
                        kids = [results[c] for c in tree.children[n]]
                        # in the caller's context: a node's generations see the run's cancel check
                        node_run = contextvars.copy_context().run
                        running[pool.submit(node_run, self._node, plan, n, kids, trace)] = n

            submit_ready()
            while running:
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in done:
                    node = running.pop(future)
                    results[node] = future.result()
                    for n in tree.nodes:
                        waiting[n].discard(node)
                submit_ready()
        root = results[ROOT]
        supporting: dict[str, PassageRef] = {}
        for n in [ROOT, *[n for n in tree.nodes if n != ROOT]]:
            for p in results[n].passages[:1] if n != ROOT else results[n].passages:
                supporting.setdefault(p.id, p)
        return RunResult(
            question=root.question,
            answer=root.answer,
            strategy=strategy,
            supporting=tuple(list(supporting.values())[: self.k]),
            trace=trace.freeze(),
            stop_reason=StopReason.ROOT_ANSWERED,
            hops=len(tree.nodes) - 1,
            execution_ms=(time.perf_counter() - started) * 1000,
            plan=plan,
        )

    def _node(self, plan: Plan, node: str, children: list[NodeResult], trace: Trace) -> NodeResult:
        main = plan.query.question or ""
        known_lines = "\n".join(f"- {c.question} {c.answer}" for c in children)
        note = ""
        if node == ROOT:
            question = main
            query = " ".join([main, *(c.answer for c in children)])
        elif self.queries == "substitute" and (filled := substitute(plan.query, node, children)) is not None:
            question, query = fill_question(filled, _target(plan, node)), search_text(filled)
            note = f"question by substitution: {question}"
        else:
            question, query = self._rewrite(plan, node, children, known_lines, trace)
        at = trace.now_ms()
        t0 = time.perf_counter()
        hits: list[Hit] = self.retriever.search(query, self.k)
        trace.record(attrs.evolve(Step.retrieve(node, query, hits, (time.perf_counter() - t0) * 1000, at), note=note))
        prompt = execution.ANSWER
        messages = prompt.messages(
            passages=execution.LINEAR.render_passages([h.passage for h in hits]),
            known=execution.KNOWN.format(lines=known_lines) if known_lines else "",
            question=question,
        )
        at = trace.now_ms()
        out = chat_reusing_prefix(self.llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
        trace.record(Step.llm(node, out.usage, out.text, at, prompt=messages, confidence=out.confidence))
        refs = tuple(PassageRef.from_hit(h) for h in hits)
        return NodeResult(node=node, question=question, answer=short_answer(out.text, question), passages=refs)

    def _rewrite(
        self, plan: Plan, node: str, children: list[NodeResult], known_lines: str, trace: Trace
    ) -> tuple[str, str]:
        """The LLM's question for ``node`` and the retrieval query (guarded when ``guard_rewrites``)."""
        main = plan.query.question or ""
        prompt = execution.REWRITE
        atom = plan.query.atom(node).text()
        messages = prompt.messages(question=main, known=known_lines or "(none)", atom=atom)
        at = trace.now_ms()
        out = chat_reusing_prefix(self.llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
        trace.record(Step.llm(node, out.usage, out.text, at, prompt=messages, confidence=out.confidence))
        question = visible(out.text).strip() or atom
        if self.guard_rewrites and _words(question) == _words(main):
            return atom, " ".join([atom, *(c.answer for c in children)])
        return question, question


def _target(plan: Plan, node: str) -> str | None:
    """The variable ``node`` answers for its parent (the one they share), else the question's."""
    atom = plan.query.atom(node)
    parent = dict(plan.tree.parent).get(node)
    if parent is not None and parent != ROOT and parent in plan.query.ids:
        shared = atom.variables & plan.query.atom(parent).variables
        if len(shared) == 1:
            return next(iter(shared))
    answers = [t.name for t in plan.query.answer if isinstance(t, Var) and t.name in atom.variables]
    return answers[0] if answers else None

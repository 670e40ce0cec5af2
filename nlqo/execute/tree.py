"""The parallel tree operator (PlanRAG): execute a logical query tree bottom-up.

Leaves rewrite their atom into a question, retrieve and answer. An inner node gathers its
children's questions and answers, rewrites its own atom with them, retrieves and answers. The root
(the question itself) answers the main question from its children's answers. A node starts only
when all its children have finished; ready nodes run concurrently on a thread pool.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import attrs

from nlqo.answers import short_answer, visible
from nlqo.execute.trace import PassageRef, RunResult, Step, Trace
from nlqo.llm.base import LLM, capabilities, chat_reusing_prefix
from nlqo.passages import Hit, Retriever
from nlqo.plan import ROOT, Plan
from nlqo.prompts import execution


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


def default_workers(plan: Plan, concurrency: int = 1) -> int:
    """The widest wave of ready nodes, capped by the larger of the CPU count and the backend's
    ``concurrency`` (requests it decodes together, e.g. llama.cpp's batched slots)."""
    widest = max(len(level) for level in plan.tree.levels())
    return max(1, min(max(os.cpu_count() or 1, concurrency), widest))


@attrs.define(eq=False)
class TreeExecutor:
    llm: LLM
    retriever: Retriever
    k: int = 3
    workers: int | None = None
    """Concurrent nodes; default :func:`default_workers`. ``parallel=False`` forces one."""
    parallel: bool = True
    guard_rewrites: bool = False
    """Replace a rewrite that only repeats the main question by the node's own atom (retrieving with
    the atom and its children's answers): small models often copy the main question."""

    def run(self, plan: Plan, *, trace: Trace | None = None, strategy: str = "tree") -> RunResult:
        trace = trace or Trace()
        started = time.perf_counter()
        tree = plan.tree
        workers = 1 if not self.parallel else (self.workers or default_workers(plan, capabilities(self.llm).concurrency))
        results: dict[str, NodeResult] = {}
        waiting = {n: set(tree.children[n]) for n in tree.nodes}
        running: dict[Future, str] = {}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nlqo-node") as pool:
            def submit_ready() -> None:
                for n in tree.nodes:
                    if not waiting[n] and n not in results and n not in running.values():
                        kids = [results[c] for c in tree.children[n]]
                        running[pool.submit(self._node, plan, n, kids, trace)] = n

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
            stop_reason="root_answered",
            hops=len(tree.nodes) - 1,
            execution_ms=(time.perf_counter() - started) * 1000,
            plan=plan,
        )

    def _node(self, plan: Plan, node: str, children: list[NodeResult], trace: Trace) -> NodeResult:
        main = plan.query.question or ""
        known_lines = "\n".join(f"- {c.question} {c.answer}" for c in children)
        if node == ROOT:
            question = main
            query = " ".join([main, *(c.answer for c in children)])
        else:
            prompt = execution.REWRITE
            messages = prompt.messages(question=main, known=known_lines or "(none)", atom=plan.query.atom(node).text())
            at = trace.now_ms()
            out = chat_reusing_prefix(self.llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
            trace.record(Step.llm(node, out.usage, out.text, at, prompt=messages))
            atom = plan.query.atom(node).text()
            question = visible(out.text).strip() or atom
            query = question
            if self.guard_rewrites and _words(question) == _words(main):
                question, query = atom, " ".join([atom, *(c.answer for c in children)])
        at = trace.now_ms()
        t0 = time.perf_counter()
        hits: list[Hit] = self.retriever.search(query, self.k)
        trace.record(Step.retrieve(node, query, hits, (time.perf_counter() - t0) * 1000, at))
        prompt = execution.ANSWER
        messages = prompt.messages(
            passages=execution.LINEAR.render_passages([h.passage for h in hits]),
            known=execution.KNOWN.format(lines=known_lines) if known_lines else "",
            question=question,
        )
        at = trace.now_ms()
        out = chat_reusing_prefix(self.llm, messages, stop=prompt.stop, max_tokens=prompt.max_tokens)
        trace.record(Step.llm(node, out.usage, out.text, at, prompt=messages))
        refs = tuple(PassageRef.from_hit(h) for h in hits)
        return NodeResult(node=node, question=question, answer=short_answer(out.text), passages=refs)

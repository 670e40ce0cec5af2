"""The linear template operator (TSSS: think straight, stop smart).

One growing text on a fixed scaffold. The scaffold's instruction and demonstrations are prefilled
once per process and reused; each hop appends its fixed segments and the retrieved passages by
prefill and generates only the sub-question and one evidence sentence. The retriever decides when
to stop: when a new sub-question is at least ``tau`` similar to the main question or an earlier
sub-question, the model writes the final answer.
"""

from __future__ import annotations

import re
import time
from typing import Sequence

import attrs

from nlqo.execution.answers import short_answer, visible
from nlqo.config import default
from nlqo.execution.terminator import Terminator
from nlqo.execution.trace import PassageRef, RunResult, Step, Trace
from nlqo.kinds import Operator, StepKind, StopReason
from nlqo.runtime.llm.base import LLM
from nlqo.runtime.llm.session import Session, TokenSession, open_session
from nlqo.common.passages import Embedder, Retriever
from nlqo.runtime.prompts.execution import LINEAR, LinearTemplate


_VARIABLE = re.compile(r"\?([A-Za-z_][A-Za-z0-9_]*)")


def step_query(atom: str, fact: str) -> str:
    """The retrieval query of a plan step: the atom with its variables as words, after the last
    fact when the atom has a variable (the fact holds the value an earlier step found).

    >>> step_query("?director directed Jaws", "")
    'director directed Jaws'
    >>> step_query("?director born in ?city", "the film Jaws was directed by Steven Spielberg.")
    'the film Jaws was directed by Steven Spielberg. director born in city'
    >>> step_query("Jaws released in 1975", "a fact")
    'Jaws released in 1975'
    """
    words = _VARIABLE.sub(lambda m: m.group(1).replace("_", " "), atom)
    return f"{fact} {words}" if fact and words != atom else words


@attrs.define(eq=False)
class LinearExecutor:
    llm: LLM
    retriever: Retriever
    embedder: Embedder
    """The retriever's own embedder, used by the terminator."""
    k: int = default("k")
    tau: float = default("tau")
    max_hops: int = default("max_hops")
    min_hops: int = 1
    """Hops run before the terminator may stop (the first sub-question often restates the question)."""
    kv_reuse: bool = default("kv_reuse")
    template: LinearTemplate = LINEAR
    max_question_tokens: int = 40
    max_evidence_tokens: int = 60
    max_answer_tokens: int = 24
    _prefix: Session | None = None

    def _session(self) -> Session:
        """A fresh session on the scaffold prefix, which is prefilled once and forked after."""
        if not self.kv_reuse:
            return open_session(self.llm, self.template.scaffold, kv_reuse=False)
        if self._prefix is None:
            self._prefix = open_session(self.llm, self.template.scaffold, kv_reuse=True)
        return self._prefix.fork()

    def run(
        self,
        question: str,
        *,
        hints: Sequence[str] = (),
        steps: Sequence[str] = (),
        trace: Trace | None = None,
        strategy: str = Operator.LINEAR.value,
    ) -> RunResult:
        """Answer ``question``. ``hints`` are shown before each proposal; ``steps`` (a plan's atoms in
        execution order) are the first hops' questions themselves, appended instead of generated and
        retrieved with the last fact in place of their variables; later hops are generated as usual."""
        trace = trace or Trace()
        started = time.perf_counter()
        t = self.template
        session = self._session()
        self._append(session, t.opening(question))
        terminator = Terminator(self.embedder, self.tau)
        terminator.start(question)
        facts: list[str] = []
        supporting: dict[str, PassageRef] = {}
        stop_reason, hops = StopReason.MAX_HOPS, 0
        if t.question_first:
            hops = 1
            facts.append(self._read(session, "hop-1", question, None, trace, supporting))
        for proposal, hop in enumerate(range(hops + 1, self.max_hops + 1)):
            node = f"hop-{hop}"
            self._newline(session)
            if proposal < len(hints):
                self._append(session, t.hint.format(step=proposal + 1, atom=hints[proposal]))
            self._append(session, t.propose.format(question=question, facts=t.facts_clause(facts)))
            if proposal < len(steps):
                sub = steps[proposal]
                self._append(session, " " + sub)
                query = step_query(sub, facts[-1] if facts else "")
            else:
                sub = self._generate(session, node, trace, self.max_question_tokens).strip()
                query = sub
            score = terminator.score(sub) if sub else 1.0
            if hop > self.min_hops and terminator.should_stop(score) or not sub:
                trace.record(
                    Step(
                        node=node,
                        kind=StepKind.STOP,
                        text="terminator" if sub else "empty question",
                        terminator_score=score,
                        started_ms=trace.now_ms(),
                    )
                )
                stop_reason = StopReason.TERMINATOR if sub else StopReason.EMPTY_QUESTION
                break
            hops = hop
            facts.append(self._read(session, node, query, score, trace, supporting))
        self._newline(session)
        self._append(session, t.final.format(question=question))
        answer = short_answer(self._generate(session, "answer", trace, self.max_answer_tokens), question)
        return RunResult(
            question=question,
            answer=answer,
            strategy=strategy,
            supporting=tuple(sorted(supporting.values(), key=lambda p: -p.score)[: self.k]),
            trace=trace.freeze(),
            stop_reason=stop_reason,
            hops=hops,
            execution_ms=(time.perf_counter() - started) * 1000,
        )

    def _read(
        self,
        session: Session,
        node: str,
        query: str,
        score: float | None,
        trace: Trace,
        supporting: dict[str, PassageRef],
    ) -> str:
        """Retrieve for ``query``, append the contexts and generate the fact they give."""
        at = trace.now_ms()
        t0 = time.perf_counter()
        hits = self.retriever.search(query, self.k)
        step = trace.record(Step.retrieve(node, query, hits, (time.perf_counter() - t0) * 1000, at))
        trace.steps[-1] = attrs.evolve(step, terminator_score=score)
        for h in hits:
            supporting.setdefault(h.passage.id, PassageRef.from_hit(h))
        self._newline(session)
        self._append(
            session, self.template.contexts.format(passages=self.template.render_passages([h.passage for h in hits]))
        )
        return self._generate(session, node, trace, self.max_evidence_tokens).strip()

    @staticmethod
    def _append(session: Session, text: str) -> None:
        """Add scaffold text. Computation is deferred to the next generation, which accounts for it."""
        session.append(text)

    @staticmethod
    def _newline(session: Session) -> None:
        """Start the next scaffold segment on a new line."""
        if not session.text.endswith("\n"):
            session.append("\n")

    def _generate(self, session: Session, node: str, trace: Trace, max_tokens: int) -> str:
        prompt, at = session.text, trace.now_ms()
        tokens = session if isinstance(session, TokenSession) else None
        keep = len(tokens.token_ids) if tokens is not None else 0
        out = session.generate(stop=("\n",), max_tokens=max_tokens)
        if tokens is not None:
            # Keep the answer text and nothing after it, as a text session does: a model may end its
            # line with a "\n\n" token or an end-of-turn token, which would otherwise stay in the
            # context that later hops see. The kept tokens are recomputed with the next segment.
            tokens.truncate(keep)
            tokens.append(out.text)
        trace.record(Step.llm(node, out.usage, out.text, at, prompt=prompt, confidence=out.confidence))
        return visible(out.text)

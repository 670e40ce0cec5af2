"""Typed trace records of execution, and the result every strategy returns."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable, Sequence

import attrs

from nlqo.execution.answers import normalize_answer, short_answer
from nlqo.kinds import StepKind, StopReason
from nlqo.runtime.llm.base import TOKEN_COUNTS, ChatMessage, Usage
from nlqo.runtime.llm.confidence import Confidence
from nlqo.common.passages import Hit


@attrs.frozen
class PassageRef:
    """A passage as a trace records it: id, title and retrieval score."""

    id: str
    title: str
    score: float = 0.0
    text: str = attrs.field(default="", eq=False, repr=False)
    """The passage's text, kept by retrieval steps for EXPLAIN; records leave it out."""

    @classmethod
    def from_hit(cls, hit: Hit, *, text: bool = False) -> "PassageRef":
        """The reference to a retrieved passage (with its text when ``text``)."""
        return cls(hit.passage.id, hit.passage.title, float(hit.score), hit.passage.text if text else "")


def prompt_text(prompt: str | Sequence[ChatMessage]) -> str:
    """A prompt as one text: a completion prompt as it is, chat messages under ``[role]`` headers.

    >>> print(prompt_text([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi?")]))
    [system]
    Be brief.
    <BLANKLINE>
    [user]
    Hi?
    """
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(f"[{m.role}]\n{m.content}" for m in prompt)


@attrs.frozen
class Step:
    """One call made while executing: an LLM generation, a retrieval, or a stop decision."""

    node: str
    """Plan node id (tree), ``hop-N`` (linear), or a strategy-specific label."""
    kind: StepKind = attrs.field(converter=StepKind)
    wall_ms: float = 0.0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    text: str = ""
    """Generated text (llm), the query (retrieve), or the reason (stop)."""
    passages: tuple[PassageRef, ...] = ()
    terminator_score: float | None = None
    started_ms: float = 0.0
    """Start time relative to the beginning of execution (for concurrency checks and timelines)."""
    prompt: str = attrs.field(default="", repr=False)
    """The prompt the model continued (llm steps), for EXPLAIN; records leave it out."""
    forced_tokens: int = 0
    """Reply tokens a grammar forced (appended without sampling); not in ``generated_tokens``."""
    note: str = ""
    """How the step's text came about when that matters to a reader (parsing: constrained or not,
    attempts, repairs)."""
    calls: int = 1
    """LLM calls the step stands for (llm steps): more than one for a parse with repairs, and the
    optimizer's relation and merge-check calls, which are one ``relations`` step."""
    confidence: Confidence | None = None
    """How sure the model was of the step's reply (llm steps whose backend reads it; not the parse
    and relations steps, which stand for several calls): :mod:`nlqo.runtime.llm.confidence`."""
    decision: tuple[tuple[str, Any], ...] = ()
    """The numbers a decision was taken by (stop steps of a cascade): the feature, its value, the
    threshold, the probabilities of being right, the answer kept and why; as ``(name, value)`` pairs."""

    @classmethod
    def llm(
        cls,
        node: str,
        usage: Usage,
        text: str,
        started_ms: float = 0.0,
        prompt: str | Sequence[ChatMessage] = "",
        note: str = "",
        confidence: Confidence | None = None,
    ) -> "Step":
        return cls(
            node=node,
            kind=StepKind.LLM,
            wall_ms=usage.wall_ms,
            text=text,
            started_ms=started_ms,
            prompt=prompt_text(prompt),
            note=note,
            calls=max(usage.calls, 1),
            confidence=confidence,
            **{name: getattr(usage, name) for name in TOKEN_COUNTS},
        )

    @classmethod
    def retrieve(cls, node: str, query: str, hits: Sequence[Hit], wall_ms: float, started_ms: float = 0.0) -> "Step":
        refs = tuple(PassageRef.from_hit(h, text=True) for h in hits)
        return cls(node=node, kind=StepKind.RETRIEVE, wall_ms=wall_ms, text=query, passages=refs, started_ms=started_ms)

    def to_dict(self, *, texts: bool = False) -> dict[str, Any]:
        """The step as JSON; ``texts`` adds the prompt and the passages' texts (EXPLAIN pages)."""
        d = attrs.asdict(self, recurse=False, filter=lambda a, _: texts or a.name != "prompt")
        d["passages"] = [attrs.asdict(p, filter=lambda a, _: texts or a.name != "text") for p in self.passages]
        if self.kind != StepKind.LLM:
            del d["calls"], d["confidence"]
        elif self.confidence is not None:
            d["confidence"] = self.confidence.to_dict()
        if self.decision:
            d["decision"] = dict(self.decision)
        else:
            del d["decision"]
        return d


@attrs.define(eq=False)
class Trace:
    """A thread-safe collector of steps, with a clock started at creation."""

    steps: list[Step] = attrs.field(factory=list)
    on_step: Callable[[Step], None] | None = None
    """Called after each record (progress lines); must be cheap."""
    _start: float = attrs.field(factory=time.perf_counter)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def now_ms(self) -> float:
        return (time.perf_counter() - self._start) * 1000

    def record(self, step: Step) -> Step:
        with self._lock:
            self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def freeze(self) -> tuple[Step, ...]:
        with self._lock:
            return tuple(self.steps)


def token_totals(steps: Iterable[Step]) -> dict[str, int]:
    """The LLM calls and each token count (:data:`~nlqo.runtime.llm.base.TOKEN_COUNTS`) of ``steps``' LLM steps."""
    llm = [s for s in steps if s.kind == StepKind.LLM]
    return {
        "llm_calls": sum(s.calls for s in llm),
        **{name: sum(getattr(s, name) for s in llm) for name in TOKEN_COUNTS},
    }


def progress_line(step: Step) -> str | None:
    """The progress line of one trace step, or None for a step that prints none; total over every
    step a trace can hold (a stop step may carry no terminator score, an LLM step no text).

    >>> from nlqo.execution.trace import Step
    >>> progress_line(Step(node="answer", kind="stop", text="retrieve"))
    '  [answer] stop (retrieve)'
    >>> progress_line(Step(node="hop-2", kind="stop", text="terminator", terminator_score=0.912))
    '  [hop-2] stop (terminator, similarity 0.91)'
    """
    if step.kind == "retrieve":
        titles = ", ".join(p.title for p in step.passages) or "no passages"
        return f"  [{step.node}] retrieve {step.text!r} -> {titles}"
    if step.kind == "llm":
        return f"  [{step.node}] generated {step.generated_tokens} tokens in {step.wall_ms / 1000:.1f} s: {(step.text or '').strip()[:100]!r}"
    if step.kind == "stop":
        score = "" if step.terminator_score is None else f", similarity {step.terminator_score:.2f}"
        return f"  [{step.node}] stop ({step.text or 'no reason given'}{score})"
    return None


PARSE_FAILED: str = StopReason.PARSE_FAILED.value
"""Stop-reason prefix of a run whose question did not parse (it ran the linear template instead)."""


@attrs.frozen
class RunResult:
    """What a strategy returns for one question."""

    question: str
    answer: str
    strategy: str
    supporting: tuple[PassageRef, ...] = ()
    """Passages the answer rests on (title and id), best first."""
    trace: tuple[Step, ...] = ()
    stop_reason: str = ""
    hops: int = 0
    planning_ms: float = 0.0
    execution_ms: float = 0.0
    plan: Any = None
    """The logical plan (tree strategies) or None."""
    physical: Any = None
    """The physical plan, when the strategy was lowered from one."""
    operator: str | None = None
    """The physical operator that answered (the engine's strategies; None for a baseline)."""
    escalation: Any = None
    """The parsed physical plan a cascade's escalation ran on, when it ran on one (``physical`` is the cascade's)."""

    @property
    def llm_steps(self) -> list[Step]:
        return [s for s in self.trace if s.kind == StepKind.LLM]

    def distinct_retrieved(self) -> list[PassageRef]:
        """Each passage the run retrieved with its text, once, in the order first retrieved, with
        its best score."""
        best: dict[str, PassageRef] = {}
        for ref in self.retrieved:
            if ref.text and (ref.id not in best or ref.score > best[ref.id].score):
                best[ref.id] = ref
        return list(best.values())

    @property
    def retrieved(self) -> list[PassageRef]:
        """Every passage the run's retrieval steps found, in order, repeats included (with texts)."""
        return [p for s in self.trace if s.kind == StepKind.RETRIEVE for p in s.passages]

    @property
    def confidence(self) -> Confidence | None:
        """How sure the model was of the answer: the confidence of the generation the answer came
        from (:func:`answer_step`), with :attr:`~nlqo.runtime.llm.confidence.Confidence.answer` set
        to the answer's own tokens; None when no generation with a confidence gave it.

        >>> from nlqo.runtime.llm.scripted import word_confidence
        >>> step = Step(node="$root", kind="llm", text="Rush.", confidence=word_confidence("Rush."))
        >>> RunResult("Which band?", "Rush", "tree", trace=(step,)).confidence.answer.tokens
        1
        """
        step = answer_step(self)
        if step is None or step.confidence is None:
            return None
        return step.confidence.with_answer(step.text, self.answer)

    def stats(self) -> dict[str, Any]:
        return {
            **token_totals(self.trace),
            "retrievals": sum(1 for s in self.trace if s.kind == StepKind.RETRIEVE),
            "hops": self.hops,
            "stop_reason": self.stop_reason,
            "planning_ms": self.planning_ms,
            "execution_ms": self.execution_ms,
        }

    def plan_tree(self) -> dict[str, str] | None:
        """The logical plan as ``{child: parent}``, or ``None`` when the run had no plan."""
        return dict(self.plan.tree.parent) if self.plan is not None else None

    def to_dict(self, *, texts: bool = False) -> dict[str, Any]:
        """The result as JSON; ``texts`` keeps prompts and passage texts in the trace."""
        return {
            "question": self.question,
            "answer": self.answer,
            "no_answer": not self.answer.strip(),
            "confidence": confidence_dict(self.confidence),
            "strategy": self.strategy,
            "operator": self.operator,
            "supporting": [{"id": p.id, "title": p.title} for p in self.supporting],
            "stats": self.stats(),
            "plan": self.plan_tree(),
            "warnings": list(getattr(self.plan, "warnings", ())),
            "left_out": [{"id": x.id, "atom": x.text, "reason": x.reason} for x in getattr(self.plan, "left_out", ())],
            "trace": [s.to_dict(texts=texts) for s in self.trace],
        }


NOT_ANSWERS = frozenset({"parse", "relations"})
"""Nodes of LLM steps that write no answer: the IR and the optimizer's pair relations."""


def answer_step(result: RunResult) -> Step | None:
    """The LLM step the answer came from: the last one whose reply's short answer is the answer
    (:func:`~nlqo.execution.answers.short_answer`, compared normalised), else the last answering
    step when its reply holds the answer (a strategy that reads its answer after a marker, or an
    answer taken from a reply's words); None for no answer, or one no generation gave.

    >>> steps = (Step(node="q1", kind="llm", text="Neil Peart"), Step(node="$root", kind="llm", text="The band: Rush"))
    >>> answer_step(RunResult("?", "Neil Peart", "tree", trace=steps)).node, answer_step(RunResult("?", "rush", "tree", trace=steps)).node
    ('q1', '$root')
    >>> answer_step(RunResult("?", "Yes", "tree", trace=steps)) is None, answer_step(RunResult("?", "ban", "tree", trace=steps)) is None
    (True, True)
    """
    answer = normalize_answer(result.answer)
    if not answer:
        return None
    answering = [s for s in result.trace if s.kind == StepKind.LLM and s.node not in NOT_ANSWERS]
    for step in reversed(answering):
        if normalize_answer(short_answer(step.text, result.question)) == answer:
            return step
    if answering and f" {answer} " in f" {normalize_answer(answering[-1].text)} ":
        return answering[-1]
    return None


def confidence_dict(confidence: Confidence | None) -> dict[str, Any] | None:
    """A confidence as JSON, or None."""
    return None if confidence is None else confidence.to_dict()

"""The work behind ``nlqo serve``: one engine, shared by a bounded pool of request threads.

The model and the index load once. Up to ``capacity`` requests run at a time (the backend's
concurrency: llama.cpp's in-process slots, whose scheduler decodes the running requests together in
one batch, or an OpenAI-compatible server's slots); up to ``queue_limit`` more wait. A request beyond
that is refused with :class:`Busy` (HTTP 429). Each request carries a :class:`~nlqo.serve.ticket.Ticket`,
its deadline and cancel switch. The ticket's check is the cancel check of the request's work
(:func:`nlqo.runtime.llm.cancel.cancel_scope`): the backends consult it before each generated token
and the run at every trace step. So when the HTTP layer gives up on a request (:meth:`Service.cancel`:
the client left) or its time runs out, a queued one leaves the queue at once and a running one stops
within a token, even in the middle of a generation, freeing its slot. Every request's outcome is
counted in :attr:`Service.stats`.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from nlqo.errors import NlqoError, ParseFailure
from nlqo.execution.trace import RunResult, Step, Trace, confidence_dict, progress_line, token_totals
from nlqo.runtime.llm.cancel import cancel_scope
from nlqo.serve.stats import Outcome, ServiceStats
from nlqo.serve.ticket import Cancelled, Ticket, TimedOut


POLL = 0.2
"""Seconds between the HTTP layer's checks of a waiting request's deadline and of the shutdown's grace."""


class Busy(NlqoError):
    """Every slot is running and the queue is full (HTTP 429)."""


class Closing(NlqoError):
    """The service is shutting down (HTTP 503)."""


def outcome_of(exc: BaseException) -> Outcome:
    """How a request that ended with ``exc`` is counted.

    >>> outcome_of(TimedOut("late")), outcome_of(Cancelled("gone")), outcome_of(Busy("full")), outcome_of(KeyError())
    (<Outcome.TIMEOUT: 'timeout'>, <Outcome.CANCELLED: 'cancelled'>, <Outcome.BUSY: 'busy'>, <Outcome.ERROR: 'error'>)
    """
    for kind, outcome in (
        (Busy, Outcome.BUSY),
        (Closing, Outcome.CLOSING),
        (TimedOut, Outcome.TIMEOUT),
        (Cancelled, Outcome.CANCELLED),
        (NlqoError, Outcome.REJECTED),
    ):
        if isinstance(exc, kind):
            return outcome
    return Outcome.ERROR


Emit = Callable[[str, dict[str, Any]], None]
"""Receives each event of a streamed run: ``(name, data)``."""


def _ignore(name: str, data: dict[str, Any]) -> None:
    pass


@attrs.define(eq=False)
class Service:
    """``engine`` behind an admission gate; thread-safe."""

    engine: Any
    """An :class:`~nlqo.main.engine.Engine`."""
    capacity: int = 1
    queue_limit: int = 16
    timeout: float = 600.0
    stats: ServiceStats = attrs.field(factory=ServiceStats)
    _pool: concurrent.futures.ThreadPoolExecutor = attrs.field(init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _admitted: int = 0
    _running: int = 0
    _closing: bool = False
    _grace_ends: float | None = None

    def __attrs_post_init__(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.capacity, thread_name_prefix="nlqo-serve")

    # -------------------------------------------------------------------------------- admission

    def submit(self, endpoint: str, work: Callable[[], dict[str, Any]], ticket: Ticket) -> concurrent.futures.Future:
        """Run ``work`` on a request thread, or refuse at once with :class:`Busy` or :class:`Closing`."""
        refusal: NlqoError | None = None
        with self._lock:
            if self._closing:
                refusal = Closing("the service is shutting down; retry on another replica")
            elif self._admitted >= self.capacity + self.queue_limit:
                refusal = Busy(f"all {self.capacity} slots are busy and {self.queue_limit} requests are waiting")
            else:
                self._admitted += 1
        if refusal is not None:
            self.stats.finished(endpoint, outcome_of(refusal), 0.0)
            raise refusal
        future = self._pool.submit(self._run, endpoint, work, ticket)
        future.add_done_callback(lambda f: self._dropped(endpoint, ticket) if f.cancelled() else None)
        return future

    def cancel(self, future: concurrent.futures.Future, ticket: Ticket, reason: NlqoError) -> None:
        """Give up on a request: a queued one leaves the queue at once, a running one stops within a token."""
        ticket.reason = reason  # before the future's cancel: the done callback counts the queued request by it
        future.cancel()
        ticket.stop(reason)

    def _dropped(self, endpoint: str, ticket: Ticket) -> None:
        """A queued request cancelled before it ran (given up on, or dropped at shutdown)."""
        with self._lock:
            self._admitted -= 1
        self.stats.finished(endpoint, outcome_of(ticket.reason or Closing("shut down")), 0.0)

    def _run(self, endpoint: str, work: Callable[[], dict[str, Any]], ticket: Ticket) -> dict[str, Any]:
        started = time.monotonic()
        with self._lock:
            self._running += 1
        outcome, body = Outcome.ERROR, {}
        try:
            with cancel_scope(ticket.check):  # the backends consult it per token, in every thread of the run
                body = work()
            # the HTTP layer may have answered 499, 503 or 504 already: count what the client got
            outcome = Outcome.OK if ticket.reason is None else outcome_of(ticket.reason)
            return body
        except BaseException as exc:
            outcome = outcome_of(exc)
            raise
        finally:
            with self._lock:
                self._running -= 1
                self._admitted -= 1
            tokens = body.get("stats") if isinstance(body, dict) else None
            if tokens is None:  # no answer: the generations it finished still cost their tokens
                tokens = token_totals(ticket.steps)
            self.stats.finished(
                endpoint,
                outcome,
                time.monotonic() - started,
                generated=tokens.get("generated_tokens", 0),
                prompt=tokens.get("prompt_tokens", 0),
            )

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            queued, running = self._admitted - self._running, self._running
        return self.stats.snapshot(queued=queued, running=running, capacity=self.capacity, queue_limit=self.queue_limit)

    def begin_close(self, grace: float) -> None:
        """Refuse new requests from now on; the admitted ones have ``grace`` seconds to finish."""
        with self._lock:
            self._closing = True
            if self._grace_ends is None:
                self._grace_ends = time.monotonic() + grace

    def past_grace(self) -> bool:
        """True once the grace of :meth:`begin_close` is over: waiting requests are answered 503."""
        return self._grace_ends is not None and time.monotonic() > self._grace_ends

    def given_up(self, ticket: Ticket) -> NlqoError | None:
        """Why the HTTP layer gives up on a request it is still waiting for, if it does: its timeout
        passed (with a margin: the run stops itself at the deadline, within a token, and answers
        so), or the shutdown's grace is over."""
        if ticket.expired(margin=5 * POLL):
            return TimedOut(f"the request took longer than its {ticket.timeout:g} s timeout")
        if self.past_grace():
            return Closing("the service shut down before the answer was ready; retry on another replica")
        return None

    def wait_idle(self, until: float) -> bool:
        """Wait until no request is admitted, or the monotonic clock reaches ``until``; True when idle."""
        while True:
            with self._lock:
                if self._admitted == 0:
                    return True
            if time.monotonic() >= until:
                return False
            time.sleep(0.05)

    def close(self, grace: float) -> bool:
        """:meth:`begin_close`, then wait for the admitted requests; True when all finished in time."""
        self.begin_close(grace)
        assert self._grace_ends is not None
        self.wait_idle(self._grace_ends)
        self._pool.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            return self._admitted == 0

    @property
    def closing(self) -> bool:
        return self._closing

    # -------------------------------------------------------------------------------- the work

    def ask(
        self, question: str, *, strategy: str, explain: str | None, ticket: Ticket, emit: Emit = _ignore
    ) -> dict[str, Any]:
        """Answer ``question``; ``explain`` ("json" or "html") adds EXPLAIN ANALYZE to the reply."""
        ticket.check()
        waited = time.monotonic() - ticket.started

        def on_step(step: Step) -> None:
            emit("step", step_event(step))
            ticket.check()

        engine = self.engine
        trace = Trace(steps=ticket.steps, on_step=on_step)
        planned = engine.prepare(question, strategy=strategy, trace=trace)
        physical = planned.physical
        emit("plan", plan_event(physical, planned.error))
        ticket.check()
        result = engine.execute(question, planned, strategy=strategy, trace=trace)
        body = answer_body(result, waited_ms=waited * 1000)
        if explain and result.physical is not None:
            from nlqo.explain import formats

            view = formats.PhysicalView.of(engine.optimizer, result.physical, result)
            body["explain"] = view.to_dict() if explain == "json" else formats.render(view, "html")
        elif explain:
            body["explain"] = None
        emit("answer", {"answer": body["answer"], "supporting": body["supporting"], "confidence": body["confidence"]})
        return body

    def explain(self, question: str, *, strategy: str, fmt: str, ticket: Ticket) -> dict[str, Any]:
        """The physical plan for ``question``, not run (``fmt``: "json" or "html")."""
        from nlqo.explain import formats

        ticket.check()
        engine = self.engine
        trace = Trace(steps=ticket.steps, on_step=lambda step: ticket.check())
        planned = engine.prepare(question, strategy=strategy, trace=trace)
        if planned.physical is None:
            last = (planned.error or "").rsplit(">>> ", 1)[-1].strip()
            raise ParseFailure(
                f"the question could not be parsed into a plan; the last error: {last}", attempts=(), errors=()
            )
        view = formats.PhysicalView.of(engine.optimizer, planned.physical)
        plan = view.to_dict() if fmt == "json" else formats.render(view, "html")
        return {
            "question": question,
            "operator": planned.physical.operator,
            "reason": planned.physical.reason,
            "plan": plan,
            "planning_ms": planned.planning_ms,
        }

    def retrieve(self, query: str, *, k: int, ticket: Ticket) -> dict[str, Any]:
        """The ``k`` passages of the index that best match ``query``."""
        ticket.check()
        started = time.perf_counter()
        hits = self.engine.retriever.search(query, k)
        return {
            "query": query,
            "k": k,
            "hits": [
                {
                    "rank": h.rank,
                    "score": float(h.score),
                    "id": h.passage.id,
                    "title": h.passage.title,
                    "text": h.passage.text,
                }
                for h in hits
            ],
            "retrieval_ms": (time.perf_counter() - started) * 1000,
        }


def step_event(step: Step) -> dict[str, Any]:
    """What a streamed step tells the client: its node and kind, a readable line, the passages' titles."""
    return {
        "node": step.node,
        "kind": str(step.kind),
        "line": (progress_line(step) or f"  [{step.node}] {step.kind}").strip(),
        "text": step.text,
        "titles": [p.title for p in step.passages],
        "wall_ms": step.wall_ms,
        "confidence": confidence_dict(step.confidence),
    }


def plan_event(physical: Any, error: str | None) -> dict[str, Any]:
    if physical is None:
        return {
            "operator": None,
            "parsed": False,
            "reason": "the question did not parse: the linear template runs",
            "error": (error or "")[-500:],
        }
    return {"operator": physical.operator, "parsed": physical.parsed, "reason": physical.reason}


def answer_body(result: RunResult, *, waited_ms: float) -> dict[str, Any]:
    """The reply to ``POST /v1/ask``: the answer, its passages (with texts), the operator and the timing."""
    texts = {p.id: p.text for p in result.distinct_retrieved()}
    stats = result.stats()
    physical = result.physical
    return {
        "question": result.question,
        "answer": result.answer,
        "no_answer": not result.answer.strip(),
        "supporting": [{"id": p.id, "title": p.title, "text": texts.get(p.id, "")} for p in result.supporting],
        "strategy": result.strategy,
        "operator": result.operator or result.strategy,
        "confidence": confidence_dict(result.confidence),
        "reason": physical.reason if physical is not None else result.stop_reason,
        "stop_reason": result.stop_reason,
        "timing": {"queue_ms": waited_ms, "planning_ms": result.planning_ms, "execution_ms": result.execution_ms},
        "stats": stats,
    }

"""Timeouts and cancellations interrupt a running generation (issue 52, the service): the request's
cancel check (:mod:`nlqo.runtime.llm.cancel`) is consulted per token by every backend, so a request
given up on stops within a token, not at the end of its step, and the backend serves the next one.

The bounds on time are generous: the point is "interrupted" against "ran to the end" (30 s)."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.llm.cancel import cancel_scope, check_cancelled, current
from nlqo.serve.ticket import Cancelled, TimedOut
from tiny_model import tiny_transformers_llm

LONG = " ".join(f"word{i}" for i in range(300))
"""A long reply: the answer prompt of the ``retrieve`` operator cuts it at 32 words (tokens)."""
WORD_S = 1.0
"""Seconds the slow double takes a word: 32 s for the answer, were it not interrupted."""


class After:
    """A cancel check that raises ``reason`` once it has been consulted ``calls`` times, or once
    ``seconds`` have passed since it was made; counts its consultations."""

    def __init__(self, *, calls: int | None = None, seconds: float | None = None, reason=None):
        self.calls, self.seconds, self.consulted = calls, seconds, 0
        self.started = time.monotonic()
        self.reason = reason or TimedOut("the request took longer than its 1 s timeout")

    def __call__(self) -> None:
        self.consulted += 1
        late = self.seconds is not None and time.monotonic() - self.started > self.seconds
        if late or (self.calls is not None and self.consulted >= self.calls):
            raise self.reason


def test_the_check_in_scope_is_the_callers_own_and_follows_copied_contexts_into_threads():
    import contextvars

    seen = []
    with cancel_scope(After(calls=1)):
        ctx = contextvars.copy_context()
        plain = threading.Thread(target=lambda: seen.append(current()))
        carried = threading.Thread(target=ctx.run, args=(lambda: seen.append(current()),))
        for t in (plain, carried):
            t.start()
            t.join()
        with pytest.raises(TimedOut):
            check_cancelled()
    assert seen[0] is None and isinstance(seen[1], After) and current() is None


# --- the serve service over a slow scripted double -------------------------------------------------


def slow_engine(**options):
    from served import make_engine

    engine, llm = make_engine(LONG, **options)
    llm.word_s = WORD_S  # the check is consulted before each word
    return engine, llm


def test_a_timeout_interrupts_a_generation_and_is_answered_504_within_seconds_not_30():
    pytest.importorskip("uvicorn")
    from served import QUESTION, call, serving

    from nlqo.serve.service import Service

    engine, llm = slow_engine()
    service = Service(engine, capacity=1)
    with serving(service) as address:
        started = time.monotonic()
        status, _, body = call(address, "POST", "/v1/ask", {"question": QUESTION, "timeout": 1})
        took = time.monotonic() - started
        idle = _wait(lambda: service.snapshot()["running"] == 0, 5)  # the slot is free again, not in 29 s
        llm.word_s = 0.0
        after = call(address, "POST", "/v1/ask", {"question": QUESTION})
        stats = call(address, "GET", "/v1/stats")[2]
        metrics = call(address, "GET", "/metrics")[2].splitlines()
    assert status == 504 and body == {
        "error": {"type": "timeout", "message": "the request took longer than its 1 s timeout"}
    }
    assert took < 4 and idle
    assert after[0] == 200 and after[2]["answer"].startswith("word0")
    assert after[2]["stats"]["generated_tokens"] * WORD_S >= 30  # what the interrupted generation would have taken
    assert stats["requests"] == {"ask ok": 1, "ask timeout": 1} and stats["outcomes"]["timeout"] == 1
    assert 'nlqo_requests_total{endpoint="ask",outcome="timeout"} 1' in metrics


def test_a_streamed_timeout_interrupts_the_generation_and_ends_in_an_error_event():
    pytest.importorskip("uvicorn")
    from served import QUESTION, call, serving

    from nlqo.serve.service import Service

    engine, _ = slow_engine()
    service = Service(engine, capacity=1)
    with serving(service) as address:
        conn = http.client.HTTPConnection(*address, timeout=30)
        body = json.dumps({"question": QUESTION, "timeout": 1, "stream": True})
        started = time.monotonic()
        conn.request("POST", "/v1/ask", body=body, headers={"Content-Type": "application/json"})
        got = []
        for line in iter(conn.getresponse().fp.readline, b""):  # up to the last event (the connection stays open)
            if line.startswith(b"event: "):
                name = line[7:].decode().strip()
            elif line.startswith(b"data: "):
                got.append((name, json.loads(line[6:])))
                if name in ("result", "error"):
                    break
        took = time.monotonic() - started
        conn.close()
        stats = call(address, "GET", "/v1/stats")[2]
    assert [n for n, _ in got][0] == "accepted" and got[-1][0] == "error"
    assert got[-1][1] == {"status": 504, "type": "timeout", "message": "the request took longer than its 1 s timeout"}
    assert "llm" not in [d["kind"] for n, d in got if n == "step"]  # the generation never finished
    assert took < 4 and stats["requests"] == {"ask timeout": 1}


def test_a_client_that_gives_up_interrupts_the_generation_in_progress():
    pytest.importorskip("uvicorn")
    from served import QUESTION, call, serving

    from nlqo.serve.service import Service

    engine, llm = slow_engine()
    service = Service(engine, capacity=1)
    with serving(service) as address:
        conn = http.client.HTTPConnection(*address, timeout=30)
        conn.request(
            "POST", "/v1/ask", body=json.dumps({"question": QUESTION}), headers={"Content-Type": "application/json"}
        )
        assert _wait(lambda: service.snapshot()["running"] == 1 and llm.calls, 10)  # generating
        time.sleep(0.5)
        conn.sock.shutdown(2)
        conn.close()
        left = time.monotonic()
        idle = _wait(lambda: service.snapshot()["running"] == 0, 5)
        took = time.monotonic() - left
        stats = call(address, "GET", "/v1/stats")[2]
    assert idle and took < 4  # the run would have gone on for 29 s
    assert stats["requests"] == {"ask cancelled": 1} and stats["outcomes"]["cancelled"] == 1


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- each backend's decode loop consults the check ---------------------------------------------------


def test_the_scripted_double_stops_at_the_word_whose_check_raises():
    from nlqo.runtime.llm.scripted import ScriptedLLM

    llm = ScriptedLLM([], default=LONG, word_s=0.001)
    check = After(calls=5)
    with cancel_scope(check), pytest.raises(TimedOut):
        llm.complete("go on", max_tokens=400)
    assert check.consulted == 5 and llm.complete("go on", max_tokens=400).text == LONG  # usable again


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    return tiny_transformers_llm()


def test_the_transformers_loop_stops_mid_generation_and_a_session_keeps_what_it_had(tiny):
    ids = tiny.encode("w3 w4 w5 w6", special=True)
    reference, generated = tiny.generate_ids(ids, max_tokens=40)
    assert len(generated) > 8  # long enough to be interrupted in the middle
    check = After(calls=6)
    with cancel_scope(check), pytest.raises(TimedOut):
        tiny.generate_ids(ids, max_tokens=40, prefix_cache=True)
    assert check.consulted == 6  # before the prefill and before each of the first forward passes
    assert tiny.generate_ids(ids, max_tokens=40, prefix_cache=True)[1] == generated

    session = tiny.session("w3 w4 w5 w6")
    session.generate(max_tokens=3)
    before, cached = session.token_ids, session.cached_tokens
    with cancel_scope(After(calls=4)), pytest.raises(TimedOut):
        session.generate(max_tokens=40)
    assert session.token_ids == before and session.cached_tokens == cached
    fresh = tiny.session("w3 w4 w5 w6")
    fresh.generate(max_tokens=3)
    assert session.generate(max_tokens=10).text == fresh.generate(max_tokens=10).text


def test_the_openai_compatible_backend_closes_the_connection_when_the_caller_gives_up():
    from loopback import Loopback, QuietHandler

    from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

    gone = threading.Event()

    class Stalling(QuietHandler):
        def do_POST(self):  # a server that takes 30 s to answer; it notices when its client leaves
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.connection.settimeout(30)
            try:
                if self.connection.recv(1) == b"":
                    gone.set()
            except OSError:
                gone.set()

    with Loopback(Stalling) as server:
        llm = OpenAICompatLLM(server.url, "stub", timeout_s=60, max_attempts=1)
        started = time.monotonic()
        with cancel_scope(After(seconds=0.5, reason=Cancelled("the client disconnected"))):
            with pytest.raises(Cancelled):
                llm.chat([ChatMessage("user", "Tell me everything.")])
        took = time.monotonic() - started
        assert gone.wait(5)
    assert took < 3


def test_a_cancelled_retry_wait_ends_at_once():
    from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

    sleeps: list[float] = []
    llm = OpenAICompatLLM("http://127.0.0.1:9", "stub", sleep=sleeps.append, jitter=0.0, backoff_s=10.0)
    check = After(calls=3)
    with cancel_scope(check), pytest.raises(TimedOut):
        llm._pause(10.0, check)
    assert sum(sleeps) < 1  # a slice or two of the 10 s, not all of it


@pytest.mark.real_model
def test_llama_cpp_drops_an_interrupted_request_and_its_batch_mate_and_the_next_are_unchanged():
    from realmodels import load_or_skip

    from nlqo.runtime.models import load_local

    llm = load_or_skip(lambda: load_local("smollm2-135m", runtime="llama-cpp", threads=2, progress=False))
    try:
        count = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,"  # the model goes on counting to its max_tokens
        other = [ChatMessage("user", "What is the capital of France? Answer in one sentence.")]
        reference = llm.complete(count, max_tokens=48)
        mate_reference = llm.chat(other, max_tokens=24)
        assert reference.usage.generated_tokens == 48

        results: dict[str, object] = {}

        def run(name, call, check=None):
            try:
                if check is None:
                    results[name] = call()
                else:
                    with cancel_scope(check):
                        results[name] = call()
            except Exception as exc:  # noqa: BLE001 - kept for the assertions
                results[name] = exc

        long_check = After(seconds=1.0)
        started = time.monotonic()
        threads = [
            threading.Thread(target=run, args=("long", lambda: llm.complete(count, max_tokens=1500), long_check)),
            threading.Thread(target=run, args=("mate", lambda: llm.chat(other, max_tokens=24))),
        ]
        for t in threads:
            t.start()
        threads[0].join(60)
        took = time.monotonic() - started
        threads[1].join(60)
        assert isinstance(results["long"], TimedOut) and took < 5  # 1500 tokens would take about a minute
        assert results["mate"].text == mate_reference.text  # decoded in the same batch, unchanged
        assert all(not s.busy for s in llm.runtime.kv.slots)
        again = llm.complete(count, max_tokens=48)  # the slot that held the interrupted request serves again
        assert again.text == reference.text
    finally:
        llm.close()


def test_a_request_that_ends_without_an_answer_counts_the_tokens_of_its_finished_generations():
    from served import make_engine

    from nlqo.execution.trace import Step
    from nlqo.serve.service import Service
    from nlqo.serve.ticket import Ticket

    service, ticket = Service(make_engine()[0], capacity=1), Ticket(timeout=60)

    def work():  # one generation finished, then the deadline
        ticket.steps.append(Step(node="q1", kind="llm", prompt_tokens=120, generated_tokens=7))
        ticket.steps.append(Step(node="q1", kind="retrieve"))
        raise TimedOut("the request took longer than its 1 s timeout")

    with pytest.raises(TimedOut):
        service._run("ask", work, ticket)
    snapshot = service.snapshot()
    assert snapshot["generated_tokens"] == 7 and snapshot["prompt_tokens"] == 120
    assert snapshot["requests"] == {"ask timeout": 1}

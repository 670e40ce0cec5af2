"""``nlqo serve`` over a scripted model (nlqo.serve): endpoints, bad requests, the queue, cancellation,
timeouts, auth, shutdown. A real uvicorn serves each app on a loopback port; clients speak HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import threading
import time

import pytest

uvicorn = pytest.importorskip("uvicorn")

from served import QUESTION, Gate, call, events, make_engine, read_events, serving  # noqa: E402
from nlqo.errors import IndexFileError  # noqa: E402
from nlqo.runtime.llm.scripted import word_confidence  # noqa: E402
from nlqo.serve.service import Service  # noqa: E402
from nlqo.serve.stats import percentile  # noqa: E402
from nlqo.serve.ticket import Cancelled, Ticket  # noqa: E402

SECRET = "/srv/secret-corpus/index"


@contextlib.contextmanager
def impatient(address, body, *, patience: float = 0.3):
    """A client with a short timeout: it sends ``body`` to /v1/ask; at the end of the block it waits
    ``patience`` seconds for the answer, then gives up and hangs up."""
    conn = http.client.HTTPConnection(*address, timeout=30)
    try:
        conn.request("POST", "/v1/ask", body=json.dumps(body), headers={"Content-Type": "application/json"})
        yield
        conn.sock.settimeout(patience)
        with pytest.raises(TimeoutError):
            conn.getresponse()
    finally:
        conn.close()


class Tickets(list):
    """The tickets the app makes, in order; :meth:`wait_for` waits until there are ``n``."""

    def __init__(self):
        super().__init__()
        self.made = threading.Condition()

    def add(self, ticket: Ticket) -> None:
        with self.made:
            self.append(ticket)
            self.made.notify_all()

    def wait_for(self, n: int, timeout: float = 10) -> bool:
        with self.made:
            return self.made.wait_for(lambda: len(self) >= n, timeout)


@pytest.fixture
def tickets(monkeypatch) -> Tickets:
    """The tickets of the requests the app receives. The app submits a request's work right after
    making its ticket, with no await between: once a ticket is made, its request is queued or running."""
    import nlqo.serve.app

    made = Tickets()

    class Recorded(Ticket):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.add(self)

    monkeypatch.setattr(nlqo.serve.app, "Ticket", Recorded)
    return made


def test_ask_returns_the_answer_its_passages_with_texts_the_operator_and_the_timing():
    engine, llm = make_engine()
    with serving(Service(engine)) as address:
        status, _, body = call(address, "POST", "/v1/ask", {"question": QUESTION})
    assert status == 200 and body["answer"] == "Steven Spielberg" and body["operator"] == "retrieve"
    assert (
        body["supporting"]
        and body["supporting"][0]["title"] == "Jaws (film)"
        and "Spielberg" in body["supporting"][0]["text"]
    )
    assert body["timing"]["execution_ms"] > 0 and body["stats"]["llm_calls"] == len(llm.calls) == 1
    assert "explain" not in body


def test_ask_returns_the_models_confidence_in_the_answer_and_in_each_streamed_step():
    engine, _ = make_engine()
    engine.llm.confidence = lambda text: word_confidence(text, words={"Steven": -0.2, "Spielberg": -0.4})
    with serving(Service(engine)) as address:
        status, _, body = call(address, "POST", "/v1/ask", {"question": QUESTION})
        streamed = events(address, {"question": QUESTION})
    assert status == 200 and body["operator"] == "retrieve"
    assert body["confidence"]["answer"]["tokens"] == 2
    assert body["confidence"]["answer"]["mean_logprob"] == pytest.approx(-0.3)
    steps = [data for name, data in streamed if name == "step" and data["kind"] == "llm"]
    assert steps and steps[-1]["confidence"]["mean_logprob"] == pytest.approx(-0.3)
    (answer,) = [data for name, data in streamed if name == "answer"]
    assert answer["confidence"] == body["confidence"]


def test_ask_with_explain_adds_explain_analyze_json_and_html():
    engine, _ = make_engine()
    with serving(Service(engine)) as address:
        _, _, as_json = call(address, "POST", "/v1/ask", {"question": QUESTION, "explain": True})
        _, _, as_html = call(address, "POST", "/v1/ask", {"question": QUESTION, "explain": "html"})
    assert (
        as_json["explain"]["physical"]["operator"] == "retrieve"
        and as_json["explain"]["analyze"]["answer"] == "Steven Spielberg"
    )
    assert as_html["explain"].lstrip().lower().startswith("<!doctype html") and "Steven Spielberg" in as_html["explain"]


def test_explain_plans_without_running_and_retrieve_searches_the_index():
    engine, llm = make_engine()
    with serving(Service(engine)) as address:
        status, _, plan = call(address, "POST", "/v1/explain", {"question": QUESTION})
        assert status == 200 and plan["operator"] == "retrieve" and plan["plan"]["physical"]["operator"] == "retrieve"
        assert llm.calls == []  # nothing ran: retrieve needs no parse
        status, _, found = call(address, "POST", "/v1/retrieve", {"query": "Spielberg born", "k": 2})
    assert (
        status == 200
        and [h["rank"] for h in found["hits"]] == [1, 2]
        and found["hits"][0]["title"] == "Steven Spielberg"
    )


@pytest.mark.parametrize(
    "raw, status, words",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"{}", 422, "question: Field required"),
        (json.dumps({"question": 5}).encode(), 422, "question"),
        (json.dumps({"question": QUESTION, "stream": "yes"}).encode(), 422, "stream"),
        (json.dumps({"question": QUESTION, "colour": "red"}).encode(), 422, "colour"),
        (json.dumps({"question": ""}).encode(), 400, "the question is empty"),
        (json.dumps({"question": "   "}).encode(), 400, "empty"),
        (json.dumps({"question": "x" * 201}).encode(), 413, "more than 200, the most this server takes"),
        (b'{"question": "caf\xe9?"}', 400, "not valid JSON: byte 17 (0xe9) is not UTF-8"),
        (json.dumps({"question": QUESTION, "strategy": "magic"}).encode(), 400, "unknown strategy 'magic'"),
        (json.dumps({"question": QUESTION, "timeout": -1}).encode(), 422, "timeout"),
        (json.dumps([QUESTION]).encode(), 422, "body"),
        (b"x" * 70000, 413, "larger than 65,536 bytes"),
    ],
)
def test_a_bad_request_is_answered_4xx_with_a_message_that_names_the_problem(raw, status, words):
    engine, llm = make_engine()
    with serving(Service(engine)) as address:
        got, _, body = call(address, "POST", "/v1/ask", raw=raw)
    assert got == status, body
    assert words in body["error"]["message"] and llm.calls == []
    assert list(body) == ["error"] and sorted(body["error"]) == ["message", "type"]  # one shape for every error
    assert "EngineConfig" not in body["error"]["message"]


@pytest.mark.parametrize(
    "method, path, content_type, raw, status, kind, words",
    [
        ("GET", "/v1/nothing", None, None, 404, "not_found", "no endpoint /v1/nothing"),
        ("GET", "/v1/ask", None, None, 405, "method_not_allowed", "GET /v1/ask is not served; use POST"),
        ("POST", "/v1/ask", "text/plain", b'{"question": "Who?"}', 415, "unsupported_media_type", "send Content-Type: application/json"),
        ("POST", "/v1/ask", None, b'{"question": "Who?"}', 415, "unsupported_media_type", "send Content-Type: application/json"),
        ("POST", "/v1/retrieve", "application/json", b'{"query": ""}', 400, "bad_question", "the query is empty"),
        ("POST", "/v1/explain", "application/json", b'{"question": 5}', 422, "invalid", "question: Input should be a valid string"),
        ("POST", "/v1/explain", "application/json", b"[1,", 400, "bad_json", "not valid JSON"),
    ],
)  # fmt: skip
def test_every_error_status_has_the_same_json_shape(method, path, content_type, raw, status, kind, words):
    engine, llm = make_engine()
    with serving(Service(engine)) as address:
        got, headers, body = call(address, method, path, raw=raw, content_type=content_type)
    assert (got, body["error"]["type"]) == (status, kind) and words in body["error"]["message"], body
    assert list(body) == ["error"] and sorted(body["error"]) == ["message", "type"] and llm.calls == []
    assert headers["content-type"] == "application/json"
    if status == 405:
        assert headers["allow"] == "POST"


def test_retrieve_checks_k_and_explain_its_format():
    engine, _ = make_engine()
    with serving(Service(engine)) as address:
        assert call(address, "POST", "/v1/retrieve", {"query": "Jaws", "k": 0})[0] == 422
        assert call(address, "POST", "/v1/retrieve", {"query": "Jaws", "k": "3"})[0] == 422
        assert call(address, "POST", "/v1/explain", {"question": QUESTION, "format": "pdf"})[0] == 422


def test_a_full_queue_is_answered_429_with_retry_after_and_waiting_requests_run_later():
    gate = Gate()
    engine, _ = make_engine(gate)
    service = Service(engine, capacity=1, queue_limit=1)
    with serving(service) as address:
        results = []
        first = threading.Thread(
            target=lambda: results.append(call(address, "POST", "/v1/ask", {"question": QUESTION}))
        )
        first.start()
        assert gate.entered.acquire(timeout=10)  # the first holds the only slot
        second = threading.Thread(
            target=lambda: results.append(call(address, "POST", "/v1/ask", {"question": QUESTION}))
        )
        second.start()
        deadline = time.monotonic() + 10
        while service.snapshot()["queue_length"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        status, headers, body = call(address, "POST", "/v1/ask", {"question": QUESTION})
        assert status == 429 and headers["retry-after"] == "2" and "1 requests are waiting" in body["error"]["message"]
        gate.opened.set()
        first.join(10)
        second.join(10)
        stats = call(address, "GET", "/v1/stats")[2]
        metrics = call(address, "GET", "/metrics")[2].splitlines()
    assert sorted(r[0] for r in results) == [200, 200] and stats["requests_served"] == 2 and stats["queue_length"] == 0
    assert stats["requests"] == {"ask busy": 1, "ask ok": 2} and stats["outcomes"]["busy"] == 1
    assert 'nlqo_requests_total{endpoint="ask",outcome="busy"} 1' in metrics


def test_requests_up_to_the_capacity_run_at_the_same_time():
    gate = Gate()
    engine, _ = make_engine(gate)
    with serving(Service(engine, capacity=2, queue_limit=0)) as address:
        threads = [
            threading.Thread(target=call, args=(address, "POST", "/v1/ask", {"question": QUESTION})) for _ in range(2)
        ]
        for t in threads:
            t.start()
        both = gate.entered.acquire(timeout=10) and gate.entered.acquire(
            timeout=10
        )  # both in the model before either is let out
        gate.opened.set()
        for t in threads:
            t.join(10)
    assert both


def test_a_client_that_leaves_mid_stream_cancels_its_run_at_the_next_step(tickets):
    gate = Gate(" When was the film Jaws released?")
    engine, llm = make_engine(gate)
    service = Service(engine, capacity=1)
    with serving(service) as address:
        got = events(address, {"question": QUESTION, "strategy": "linear"}, stop_after=2)  # accepted, then the plan
        assert [name for name, _ in got] == ["accepted", "plan"]
        assert gate.entered.acquire(timeout=10)
        calls_then = len(llm.calls)
        assert tickets[0].cancel.wait(10)  # the server saw the hang-up while the model was busy
        gate.opened.set()
        deadline = time.monotonic() + 10
        while service.snapshot()["running"] and time.monotonic() < deadline:
            time.sleep(0.02)
        stats = call(address, "GET", "/v1/stats")[2]
    assert stats["requests"].get("ask cancelled") == 1 and stats["running"] == 0
    assert len(llm.calls) <= calls_then + 1  # the linear template would go on for hops; it stopped at the next step


def test_a_client_that_gives_up_on_a_running_ask_stops_its_run_at_the_next_step(tickets):
    gate = Gate(" When was the film Jaws released?")  # the linear template would go on for hops
    engine, llm = make_engine(gate)
    with serving(Service(engine, capacity=1)) as address:
        try:
            with impatient(address, {"question": QUESTION, "strategy": "linear"}):
                assert gate.entered.acquire(timeout=10)  # in the model when the client gives up
            assert tickets[0].cancel.wait(10)  # the server saw it go
        finally:
            gate.opened.set()
        after = call(address, "POST", "/v1/ask", {"question": QUESTION})  # runs once the slot is free
        stats = call(address, "GET", "/v1/stats")[2]
        metrics = call(address, "GET", "/metrics")[2].splitlines()
    assert after[0] == 200 and isinstance(tickets[0].reason, Cancelled)
    assert stats["requests"] == {"ask cancelled": 1, "ask ok": 1} and stats["outcomes"]["cancelled"] == 1
    assert 'nlqo_requests_total{endpoint="ask",outcome="cancelled"} 1' in metrics
    assert len(llm.calls) == 2  # one each: the abandoned run stopped at the step after its first call


def test_a_client_that_gives_up_while_queued_leaves_the_queue_at_once(tickets):
    gate = Gate()
    engine, llm = make_engine(gate)
    with serving(Service(engine, capacity=1, queue_limit=1)) as address:
        first = threading.Thread(target=call, args=(address, "POST", "/v1/ask", {"question": QUESTION}))
        try:
            first.start()
            assert gate.entered.acquire(timeout=10)  # the first holds the only slot
            with impatient(address, {"question": QUESTION}):
                assert tickets.wait_for(2)  # the second is in the queue's only place
            assert tickets[1].cancel.wait(10)
            # while the first still runs, its place in the queue is free again: a third is admitted, not refused 429
            conn = http.client.HTTPConnection(*address, timeout=30)
            body = json.dumps({"question": QUESTION, "stream": True})
            conn.request("POST", "/v1/ask", body=body, headers={"Content-Type": "application/json"})
            third = conn.getresponse()
            assert third.status == 200 and gate.waiting == 1
        finally:
            gate.opened.set()
        got = read_events(third)
        conn.close()
        first.join(10)
        stats = call(address, "GET", "/v1/stats")[2]
    assert got[-1][0] == "result" and len(llm.calls) == 2  # the second never ran
    assert stats["requests"] == {"ask cancelled": 1, "ask ok": 2} and stats["queue_length"] == 0


def test_a_streamed_ask_reports_each_step_then_the_result():
    engine, _ = make_engine()
    with serving(Service(engine)) as address:
        got = events(address, {"question": QUESTION})
    names = [n for n, _ in got]
    assert names[0] == "accepted" and names[1] == "plan" and names[-2:] == ["answer", "result"]
    steps = [d for n, d in got if n == "step"]
    assert [s["kind"] for s in steps][:2] == ["retrieve", "llm"] and "Jaws (film)" in steps[0]["titles"]
    assert got[-1][1]["answer"] == "Steven Spielberg"


def test_a_request_past_its_timeout_is_answered_504_and_frees_its_slot():
    gate = Gate()
    engine, _ = make_engine(gate)
    service = Service(engine, capacity=1)
    with serving(service) as address:
        status, _, body = call(address, "POST", "/v1/ask", {"question": QUESTION, "timeout": 0.3})
        gate.opened.set()
        assert status == 504 and "0.3 s timeout" in body["error"]["message"]
        assert call(address, "POST", "/v1/ask", {"question": QUESTION})[0] == 200  # runs once the slot is free
        stats = call(address, "GET", "/v1/stats")[2]
        metrics = call(address, "GET", "/metrics")[2].splitlines()
    assert stats["requests"] == {"ask ok": 1, "ask timeout": 1} and stats["outcomes"]["timeout"] == 1
    assert 'nlqo_requests_total{endpoint="ask",outcome="timeout"} 1' in metrics


def test_the_token_is_required_everywhere_but_the_console_page_and_health():
    engine, _ = make_engine()
    with serving(Service(engine), token="s3cret") as address:
        assert call(address, "POST", "/v1/ask", {"question": QUESTION})[0] == 401
        assert (
            call(address, "POST", "/v1/ask", {"question": QUESTION}, headers={"Authorization": "Bearer wrong"})[0]
            == 401
        )
        assert call(address, "GET", "/metrics")[0] == 401
        assert (
            call(address, "POST", "/v1/ask", {"question": QUESTION}, headers={"Authorization": "Bearer s3cret"})[0]
            == 200
        )
        assert call(address, "GET", "/v1/health")[0] == 200 and call(address, "GET", "/")[0] == 200


def test_errors_never_show_server_paths_or_internal_state():
    engine, _ = make_engine()

    def broken(query, k):
        raise IndexFileError(f"{SECRET}/vectors.faiss is damaged")

    engine.retriever.search = broken
    with serving(Service(engine), redact=(SECRET,)) as address:
        status, _, body = call(address, "POST", "/v1/retrieve", {"query": f"where is {SECRET}"})
    assert status == 502 and SECRET not in json.dumps(body) and "server log" in body["error"]["message"]


def test_a_closing_service_answers_503_and_lets_running_requests_finish():
    gate = Gate()
    engine, _ = make_engine(gate)
    service = Service(engine, capacity=1)
    with serving(service) as address:
        results = []
        running = threading.Thread(
            target=lambda: results.append(call(address, "POST", "/v1/ask", {"question": QUESTION}))
        )
        running.start()
        assert gate.entered.acquire(timeout=10)
        service.begin_close(grace=30)
        status, _, body = call(address, "POST", "/v1/ask", {"question": QUESTION})
        health = call(address, "GET", "/v1/health")[0]
        gate.opened.set()
        running.join(10)
    assert status == 503 and "shutting down" in body["error"]["message"] and health == 503
    assert results[0][0] == 200 and results[0][2]["answer"] == "Steven Spielberg"


def test_stats_and_metrics_count_what_was_served():
    engine, _ = make_engine()
    with serving(Service(engine)) as address:
        for _ in range(3):
            call(address, "POST", "/v1/ask", {"question": QUESTION})
        call(address, "POST", "/v1/ask", {"question": "   "})
        stats = call(address, "GET", "/v1/stats")[2]
        status, headers, metrics = call(address, "GET", "/metrics")
    assert (
        stats["requests_served"] == 3
        and stats["latency_seconds"]["window"] == 3
        and stats["latency_seconds"]["p95"] > 0
    )
    assert stats["generated_tokens"] == 6  # two words per answer
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert (
        'nlqo_requests_total{endpoint="ask",outcome="ok"} 3' in metrics.splitlines()
        and "nlqo_queue_length 0" in metrics.splitlines()
    )
    # the latency is a Prometheus histogram: cumulative buckets up to +Inf, then _sum and _count
    assert "# TYPE nlqo_latency_seconds histogram" in metrics.splitlines()
    buckets = re.findall(r'^nlqo_latency_seconds_bucket\{endpoint="ask",le="([^"]+)"\} (\d+)$', metrics, re.M)
    counts = [int(n) for _, n in buckets]
    assert buckets[-1] == ("+Inf", "3") and counts == sorted(counts) and len(buckets) > 5
    assert 'nlqo_latency_seconds_count{endpoint="ask"} 3' in metrics.splitlines()
    total = float(re.search(r'^nlqo_latency_seconds_sum\{endpoint="ask"\} (\S+)$', metrics, re.M).group(1))
    assert 0 < total == pytest.approx(stats["latency_seconds"]["histogram"]["ask"]["sum"])


def test_the_console_and_the_schema_page_load_nothing_from_the_network():
    engine, _ = make_engine()
    with serving(Service(engine)) as address:
        console = call(address, "GET", "/")[2]
        docs = call(address, "GET", "/docs")[2]
        schema = call(address, "GET", "/openapi.json")[2]
    assert "<form" in console and "/v1/ask" in console
    for page in (console, docs):
        assert 'src="http' not in page and 'href="http' not in page and "cdn" not in page.lower()
    assert {"/v1/ask", "/v1/explain", "/v1/retrieve", "/v1/health", "/v1/stats", "/metrics"} <= set(schema["paths"])
    assert "/v1/ask" in docs


@pytest.mark.parametrize(
    "values, q, expected",
    [([3.0, 1.0, 2.0], 50, 2.0), ([1.0] * 19 + [9.0], 95, 1.0), ([1.0] * 18 + [9.0, 9.0], 95, 9.0)],
)
def test_percentiles_are_nearest_rank(values, q, expected):
    assert percentile(values, q) == expected

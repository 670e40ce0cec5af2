"""Fault injection for the OpenAI-compatible backend: a raw socket server on 127.0.0.1 answers with
errors, rate limits, silence, stalls, trickles, dropped connections and broken bodies.

Every test counts the requests the server received (retries are bounded), records the backoff
waits through the backend's ``sleep`` (they grow), and checks the error: an ``NlqoError`` naming the
URL and what happened. Nothing is timed: a server that would hold a request too long is stopped by
the backend's own ``timeout_s``, and a trickle that outlasts it would otherwise *succeed*.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Callable

import pytest

from nlqo.errors import LLMError, NlqoError
from nlqo.runtime.llm.base import ChatMessage
from nlqo.runtime.llm.openai_compat import OpenAICompatLLM

OK = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop"}], "usage": {}}
).encode()
HI = [ChatMessage("user", "hi")]
TIMEOUT = 0.5
"""The backend's ``timeout_s`` in these tests: every wait below is bounded by it."""

Behaviour = Callable[[socket.socket, threading.Event], None]


class FaultServer:
    """A raw HTTP/1.1 server on loopback: each request is read whole, counted, and handed to the
    next behaviour of a script (the last one repeats), which writes (or does not write) the reply.
    Behaviours that hang wait on ``stop``, which is set when the ``with`` block ends."""

    def __init__(self, *script: Behaviour):
        self.script = script
        self.requests: list[str] = []
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def __enter__(self) -> "FaultServer":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.listener.close()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            header, _, body = head.partition(b"\r\n\r\n")
            lines = header.decode("latin-1").split("\r\n")
            length = next(
                (int(v) for k, _, v in (line.partition(":") for line in lines[1:]) if k.lower() == "content-length"), 0
            )
            while len(body) < length:
                body += conn.recv(65536)
            behaviour = self.script[min(len(self.requests), len(self.script) - 1)]
            self.requests.append(lines[0])
            try:
                behaviour(conn, self.stop)
            except OSError:  # the client gave up first
                pass


def head(status: str, length: int | None, *extra: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", *extra]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def reply(status: str = "200 OK", body: bytes = OK, *extra: str) -> Behaviour:
    return lambda conn, stop: conn.sendall(head(status, len(body), *extra) + body)


def hang(conn: socket.socket, stop: threading.Event) -> None:
    """Read the request, never answer."""
    stop.wait()


def headers_then_stall(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(head("200 OK", len(OK)) + OK[:10])
    stop.wait()


def trickle(data: bytes, every: float = 0.05, prefix: bytes = b"") -> Behaviour:
    """Send ``prefix``, then ``data`` a byte ``every`` seconds: each byte well within the socket
    timeout, the whole beyond it."""

    def send(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(prefix)
        for i in range(len(data)):
            if stop.wait(every):
                return
            conn.sendall(data[i : i + 1])

    return send


def drop_mid_response(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(head("200 OK", len(OK)) + OK[:20])


def close_without_answer(conn: socket.socket, stop: threading.Event) -> None:
    pass


def backend(url: str, sleeps: list[float], **options) -> OpenAICompatLLM:
    options = {"max_attempts": 3, "backoff_s": 0.01, "jitter": 0.0, "timeout_s": TIMEOUT, **options}
    return OpenAICompatLLM(url, "m", sleep=sleeps.append, **options)


def failure(server: FaultServer, **options) -> tuple[str, list[float]]:
    """The message of the error a chat request ends in, and the waits between its attempts."""
    sleeps: list[float] = []
    with pytest.raises(NlqoError) as err:
        backend(server.url, sleeps, **options).chat(HI)
    assert isinstance(err.value, LLMError)
    assert f"{server.url}/chat/completions: " in str(err.value)
    return str(err.value), sleeps


# --- retried faults: bounded attempts, growing waits ---------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (
            reply("500 Internal Server Error", b'{"error": "model crashed"}'),
            'HTTP 500 Internal Server Error: {"error": "model crashed"}',
        ),
        (reply("429 Too Many Requests", b"slow down"), "HTTP 429 Too Many Requests: slow down"),
        (hang, f"timed out: no complete response within {TIMEOUT:g} s (timeout_s)"),
        (headers_then_stall, f"timed out: no complete response within {TIMEOUT:g} s (timeout_s)"),
        (
            trickle(OK, prefix=head("200 OK", len(OK))),
            f"timed out: no complete response within {TIMEOUT:g} s (timeout_s)",
        ),
        (
            trickle(b"HTTP/1.1 200 OK\r\n" + b"X-Filler: 1\r\n" * 90),
            f"timed out: no complete response within {TIMEOUT:g} s (timeout_s)",
        ),
        (
            drop_mid_response,
            f"the server closed the connection mid-response (20 bytes read, {len(OK) - 20} more expected)",
        ),
        (close_without_answer, "the server closed the connection without answering"),
    ],
    ids=[
        "500",
        "429",
        "hang",
        "headers-then-stall",
        "trickled-body",
        "trickled-headers",
        "drop-mid-response",
        "close-without-answer",
    ],
)
def test_a_transient_fault_is_retried_a_bounded_number_of_times_with_growing_waits(behaviour, reason):
    with FaultServer(behaviour) as server:
        message, sleeps = failure(server, max_attempts=4)
    assert len(server.requests) == 4
    assert message.endswith(f"gave up after 4 attempts; last: {reason}")
    assert sleeps == [0.01, 0.02, 0.04]


def test_backoff_is_capped_and_jitter_only_lengthens_it():
    with FaultServer(reply("503 Service Unavailable", b"loading")) as server:
        _, sleeps = failure(server, max_attempts=6, backoff_s=0.01, max_delay_s=0.05, jitter=0.1)
    assert len(server.requests) == 6
    for wait, base in zip(sleeps, [0.01, 0.02, 0.04, 0.05, 0.05], strict=True):
        assert base <= wait <= base * 1.1


def test_a_fault_then_success_returns_the_answer():
    with FaultServer(hang, drop_mid_response, reply("429 Too Many Requests", b"", "Retry-After: 0"), reply()) as server:
        sleeps: list[float] = []
        out = backend(server.url, sleeps, max_attempts=4).chat(HI)
    assert out.text == "Paris"
    assert len(server.requests) == 4
    assert sleeps == [0.01, 0.02, 0.0]  # the 429's Retry-After replaces the third wait


@pytest.mark.parametrize("value", ["nan", "inf", "-5", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_an_odd_retry_after_never_breaks_the_wait(value):
    """A NaN ``Retry-After`` used to reach ``time.sleep`` (ValueError); it and an infinite one are
    ignored like any unreadable value; a negative one or a date in the past waits nothing."""
    with FaultServer(reply("429 Too Many Requests", b"", f"Retry-After: {value}")) as server:
        _, sleeps = failure(server, max_attempts=2, max_delay_s=0.05)
    assert len(server.requests) == 2
    assert sleeps == [{"nan": 0.01, "inf": 0.01}.get(value, 0.0)]


def test_a_real_sleep_waits_between_attempts():
    """Not a timing test: the default ``sleep`` is called, and the attempts are still bounded."""
    with FaultServer(reply("503 Service Unavailable", b"busy")) as server:
        with pytest.raises(LLMError, match="gave up after 2 attempts"):
            OpenAICompatLLM(server.url, "m", max_attempts=2, backoff_s=0.01, timeout_s=TIMEOUT).chat(HI)
    assert len(server.requests) == 2


# --- faults that fail at once ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "shown"),
    [
        (
            reply(body=b'{"choices": [{"message": '),
            "response is not JSON (Expecting value: line 1 column 26 (char 25); 25 bytes)",
        ),
        (
            reply(body=b"<html>Bad Gateway</html>"),
            "response is not JSON (Expecting value: line 1 column 1 (char 0); 24 bytes)",
        ),
        (
            lambda conn, stop: conn.sendall(head("200 OK", None, "Connection: close") + OK[:30]),
            "response is not JSON (Unterminated string",
        ),
        (
            lambda conn, stop: conn.sendall(head("200 OK", 12) + OK),
            "response is not JSON (Expecting value: line 1 column 13 (char 12); 12 bytes)",
        ),
    ],
    ids=["truncated-json", "html", "truncated-without-length", "content-length-too-small"],
)
def test_a_body_that_is_not_json_fails_at_once(behaviour, shown):
    with FaultServer(behaviour) as server:
        message, sleeps = failure(server)
    assert len(server.requests) == 1 and sleeps == []
    assert shown in message


@pytest.mark.parametrize(
    "body",
    [
        [],
        "just text",
        {"choices": "none"},
        {"choices": [{"message": {"content": 5}}]},
        {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": "many"}},
        {"choices": [{"message": {"content": "ok"}}], "usage": [1, 2]},
    ],
    ids=["list", "string", "choices-string", "content-number", "usage-count-text", "usage-list"],
)
def test_json_of_the_wrong_shape_fails_at_once_with_an_llm_error(body):
    with FaultServer(reply(body=json.dumps(body).encode())) as server:
        message, sleeps = failure(server)
    assert len(server.requests) == 1 and sleeps == []
    assert "unexpected response shape" in message
    assert json.dumps(body)[:40] in message


def test_a_client_error_is_not_retried():
    with FaultServer(reply("404 Not Found", b"no such route")) as server:
        message, sleeps = failure(server)
    assert len(server.requests) == 1 and sleeps == []
    assert message.endswith("HTTP 404 Not Found: no such route")


# --- the slots probe -------------------------------------------------------------------------------


def test_a_silent_server_reports_no_slots_within_the_timeout():
    """``capabilities`` asks ``/props`` and ``/slots``; a server that answers them too slowly (here
    four slots, a byte at a time) leaves the backend at one request at a time, having asked each
    once, and not again right away."""
    props = json.dumps({"total_slots": 4}).encode()
    with FaultServer(trickle(head("200 OK", len(props)) + props)) as server:
        llm = backend(server.url, [])
        assert llm.concurrency == 1
        assert llm.capabilities.concurrency == 1
    assert [r.split()[:2] for r in server.requests] == [["GET", "/props"], ["GET", "/slots"]]


def test_the_deadline_does_not_cut_a_slow_reply_that_ends_in_time():
    with FaultServer(trickle(head("200 OK", len(OK)) + OK, every=0.002)) as server:
        sleeps: list[float] = []
        out = backend(server.url, sleeps, timeout_s=60.0).chat(HI)
    assert out.text == "Paris" and sleeps == []

"""``nlqo serve`` as a process on the real 135M model: answers equal the single-process ones, a killed
server restarts and serves again, and the console works in headless Chromium (issue 40)."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from browser import CHROMIUM, Chromium
from nlqo.cli import main
from realmodels import unavailable

pytestmark = pytest.mark.real_model

PASSAGES = [
    {"id": "a1", "title": "Jaws (film)", "text": "Jaws is a 1975 thriller film directed by Steven Spielberg."},
    {
        "id": "a2",
        "title": "Steven Spielberg",
        "text": "Steven Spielberg is an American film director born in Cincinnati, Ohio.",
    },
    {"id": "a3", "title": "Cincinnati", "text": "Cincinnati is a city in the state of Ohio."},
    {"id": "a4", "title": "The Hobbit", "text": "The Hobbit is a novel by J. R. R. Tolkien, published in 1937."},
]
QUESTIONS = ("Who directed Jaws?", "In which city was the director of the film Jaws born?")
UNASKED = (
    "In which country was the director of the film Jaws born, and in which year?",
    "Which city was the author of The Hobbit born in, and who directed Jaws?",
)
"""Multi-hop questions no other test asks the module's server (the timeout test needs them cold)."""
LONG_QUESTION = (
    "Who was born first: the director of the film Jaws, the author of The Hobbit or the designer of the "
    "Analytical Engine, and in which cities were each of them born?"
)
"""A question whose parse alone takes the 135M model seconds, cold (a fresh server has nothing of it)."""
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve")
    corpus = folder / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")
    assert main(["index", str(corpus), "--out", str(folder / "index"), "--quiet"]) == 0
    return folder / "index"


class Server:
    """``nlqo serve`` in a child process on a free loopback port."""

    def __init__(self, index: Path, *extra: str):
        cmd = [
            sys.executable,
            "-m",
            "nlqo",
            "serve",
            "--index",
            str(index),
            "--model",
            MODEL,
            "--port",
            "0",
            "-k",
            "2",
            *extra,
        ]
        self.process = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        said = []
        for line in self.process.stderr:
            said.append(line)
            if match := re.search(r"serving on http://([\d.]+):(\d+)", line):
                self.address = (match.group(1), int(match.group(2)))
                break
        else:
            text = "".join(said)
            if "not installed" in text or "not available" in text:
                unavailable(f"the serve tests need {MODEL}: {text[-300:]}")
            raise AssertionError(f"nlqo serve did not start:\n{text}")
        self.said = said
        """The lines the server wrote to standard error (its log), as they come."""
        self._logging = threading.Thread(target=lambda: said.extend(self.process.stderr), daemon=True)
        self._logging.start()

    def request(self, method: str, path: str, body=None, timeout: float = 300):
        conn = http.client.HTTPConnection(*self.address, timeout=timeout)
        try:
            conn.request(
                method,
                path,
                body=None if body is None else json.dumps(body),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def stop(self, sig=signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.process.wait(60)


@pytest.fixture(scope="module")
def server(index):
    s = Server(index)
    yield s
    s.stop()


def single_process_answer(index: Path, question: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nlqo",
            "ask",
            question,
            "--index",
            str(index),
            "--model",
            MODEL,
            "-k",
            "2",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["answer"]


def test_served_answers_equal_the_single_process_answers_also_when_asked_at_once(server, index):
    expected = {q: single_process_answer(index, q) for q in QUESTIONS}
    replies: dict[str, list] = {q: [] for q in QUESTIONS}
    threads = [
        threading.Thread(target=lambda q=q: replies[q].append(server.request("POST", "/v1/ask", {"question": q})))
        for q in QUESTIONS * 2
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    for q in QUESTIONS:
        assert [status for status, _ in replies[q]] == [200, 200]
        assert [body["answer"] for _, body in replies[q]] == [expected[q]] * 2
    stats = server.request("GET", "/v1/stats")[1]
    assert stats["requests_served"] >= 4 and stats["latency_seconds"]["p50"] > 0 and stats["generated_tokens"] > 0


def test_a_streamed_ask_on_the_real_model_reports_its_steps(server):
    conn = http.client.HTTPConnection(*server.address, timeout=300)
    conn.request(
        "POST",
        "/v1/ask",
        body=json.dumps({"question": QUESTIONS[1], "stream": True, "explain": True}),
        headers={"Content-Type": "application/json"},
    )
    text = conn.getresponse().read().decode()
    names = re.findall(r"^event: (\w+)$", text, re.M)
    assert names[:2] == ["accepted", "plan"] and "step" in names and names[-1] == "result"
    result = json.loads(text.rsplit("data: ", 1)[1])
    assert result["explain"]["physical"]["operator"] == result["operator"]


def test_a_killed_server_restarts_and_serves_the_same_answer(index):
    first = Server(index)
    status, body = first.request("POST", "/v1/ask", {"question": QUESTIONS[0]})
    assert status == 200
    hanging = threading.Thread(target=lambda: _swallow(first.request, "POST", "/v1/ask", {"question": QUESTIONS[1]}))
    hanging.start()
    _wait_for(lambda: _admitted(first) > 0, "the second question was never admitted")
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL  # mid-request
    hanging.join(30)
    second = Server(index)
    try:
        again = second.request("POST", "/v1/ask", {"question": QUESTIONS[0]})
        assert again[0] == 200 and again[1]["answer"] == body["answer"]
    finally:
        assert second.stop() == 0  # SIGTERM: a graceful stop


def _admitted(server: Server) -> int:
    """Requests the server is answering or has queued, from its /v1/stats."""
    stats = server.request("GET", "/v1/stats", timeout=10)[1]
    return stats["running"] + stats["queue_length"]


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` until it holds; fail saying ``what`` after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _swallow(call, *args):
    try:
        call(*args)
    except OSError:
        pass  # the server was killed under it


def test_the_console_asks_streams_the_steps_and_shows_the_answer_and_the_plan(server, tmp_path):
    if CHROMIUM is None:
        unavailable("chromium is not installed (Debian: apt-get install chromium; `make install-test` tries)")
    pytest.importorskip("websocket", reason="websocket-client is not installed (pip install -e '.[test]')")
    host, port = server.address
    with Chromium() as chromium:
        page = chromium.page
        page.open(f"http://{host}:{port}/")
        page.eval(f"document.getElementById('question').value = {json.dumps(QUESTIONS[1])}")
        page.click("#go")
        state = page.wait_for(
            "document.body.dataset.state === 'answered' || document.body.dataset.state === 'failed' ? document.body.dataset.state : ''",
            timeout=300,
        )
        assert state == "answered", page.eval("document.getElementById('error').textContent")
        steps = page.eval("[...document.querySelectorAll('#steps li')].map(li => li.textContent)")
        assert (
            steps[0].startswith("plan: ") and any("retrieve" in s for s in steps) and steps[-1].startswith("answer: ")
        )
        answer = page.eval("document.getElementById('answer').textContent")
        assert answer and page.eval("document.querySelectorAll('#passages li').length") >= 1
        assert page.wait_for("document.getElementById('plan').srcdoc.includes('nlqo-plans')")
        assert page.errors() == []
        assert all(url.startswith(f"http://{host}:{port}/") or url.startswith("about:") for url in page.requests())
        shot = page.screenshot(tmp_path / "console.png")
        if os.environ.get("NLQO_SCREENSHOTS"):
            shutil.copy(shot, Path(os.environ["NLQO_SCREENSHOTS"]) / "serve-console.png")


def ask_streamed(address, body: dict, *, timeout: float = 300) -> tuple[list, float]:
    """The server-sent events of a streamed ask up to its ``result`` or ``error`` event (the connection
    stays open after it), as (name, data), and the seconds until that event."""
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    started = time.monotonic()
    try:
        conn.request(
            "POST", "/v1/ask", body=json.dumps({**body, "stream": True}), headers={"Content-Type": "application/json"}
        )
        response = conn.getresponse()
        assert response.status == 200
        return read_until_end(response), time.monotonic() - started
    finally:
        conn.close()


def read_until_end(response: http.client.HTTPResponse) -> list:
    """(name, data) of each server-sent event up to ``result`` or ``error`` (or the end of the stream)."""
    got, name = [], None
    for line in iter(response.fp.readline, b""):
        if line.startswith(b"event: "):
            name = line[7:].decode().strip()
        elif line.startswith(b"data: "):
            got.append((name, json.loads(line[6:])))
            if name in ("result", "error"):
                break
    return got


def test_a_timeout_interrupts_the_real_models_generation_and_the_next_request_is_answered(server):
    """A 1 s timeout ends a request within seconds, in the middle of a generation that would take
    longer (issue 52: it was answered when the step ended, 9.1 s), and the model serves the next one
    (its llama.cpp slot left consistent)."""
    body = {"question": QUESTIONS[1], "strategy": "tree"}  # its parse generates for seconds on the 135M model
    reference, _ = ask_streamed(server.address, body)
    assert reference[-1][0] == "result"
    longest = max((d["wall_ms"] for n, d in reference if n == "step" and d["kind"] == "llm"), default=0.0) / 1000
    # questions asked for the first time: a question asked before may be answered within the second
    # from what the engine keeps (its parse, its relations, the model's cached prefixes)
    fresh = [{"question": q, "strategy": "tree", "timeout": 1} for q in UNASKED]
    started = time.monotonic()
    status, reply = server.request("POST", "/v1/ask", fresh[0])
    took = time.monotonic() - started
    streamed, streamed_took = ask_streamed(server.address, fresh[1])
    again = server.request("POST", "/v1/ask", body)
    stats = server.request("GET", "/v1/stats")[1]
    assert status == 504 and reply["error"] == {
        "type": "timeout",
        "message": "the request took longer than its 1 s timeout",
    }
    assert streamed[-1] == ("error", {"status": 504, **reply["error"]})
    assert took < 4 and streamed_took < 4, (took, streamed_took, longest)
    if longest > 4:  # a generation longer than the bound: the interrupted ones never reached its end
        assert not [d for n, d in streamed if n == "step" and d["wall_ms"] / 1000 > 4]
    assert again[0] == 200 and again[1]["answer"] == reference[-1][1]["answer"]
    assert stats["requests"].get("ask timeout", 0) >= 2 and stats["running"] == 0


def test_sigterm_answers_503_during_the_grace_and_ends_an_open_stream_with_an_error_event(index):
    """Issue 52, item 4: on SIGTERM new requests, /v1/health and requests on keep-alive connections
    opened before are answered 503 while the grace lasts; a stream still open when it ends gets an
    ``error`` event; the process exits 0 and its log has no traceback."""
    s = Server(index, "--grace", "1")
    try:
        idle = http.client.HTTPConnection(*s.address, timeout=30)  # a keep-alive connection, idle at the signal
        idle.request("GET", "/v1/health")
        first = idle.getresponse()
        assert first.status == 200 and json.loads(first.read())["status"] == "ok"
        stream = http.client.HTTPConnection(*s.address, timeout=60)
        body = {"question": LONG_QUESTION, "strategy": "tree", "stream": True}  # seconds of parsing, cold
        stream.request("POST", "/v1/ask", body=json.dumps(body), headers={"Content-Type": "application/json"})
        response = stream.getresponse()
        assert response.status == 200 and response.fp.readline()  # the stream is open
        _wait_for(lambda: _admitted(s) > 0, "the streamed question was never admitted")
        s.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        health = _wait_for_status(s.address, "GET", "/v1/health", 503)
        asked = s.request("POST", "/v1/ask", {"question": QUESTIONS[0]}, timeout=30)
        idle.request("GET", "/v1/health")
        again = idle.getresponse()
        kept_alive = (again.status, json.loads(again.read()))
        events = read_until_end(response)
        ended = time.monotonic() - signalled
        stream.close()
        idle.close()
        assert s.process.wait(60) == 0
    finally:
        if s.process.poll() is None:
            s.process.kill()
    s._logging.join(10)
    log = "".join(s.said)
    assert health["status"] == "closing"
    assert asked[0] == 503 and asked[1]["error"]["type"] == "closing"
    assert kept_alive[0] == 503 and kept_alive[1]["status"] == "closing"
    assert events[-1][0] == "error" and events[-1][1]["status"] == 503 and events[-1][1]["type"] == "closing"
    assert 0.5 < ended < 8  # at the end of the 1 s grace
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    assert "nlqo: stopped" in log


def _wait_for_status(address, method: str, path: str, status: int, timeout_s: float = 10.0) -> dict:
    """The JSON body of ``method path`` once it is answered ``status`` (polled)."""
    deadline = time.monotonic() + timeout_s
    while True:
        conn = http.client.HTTPConnection(*address, timeout=10)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            got, body = response.status, json.loads(response.read())
        finally:
            conn.close()
        if got == status:
            return body
        assert time.monotonic() < deadline, f"{method} {path} still answered {got}"
        time.sleep(0.05)

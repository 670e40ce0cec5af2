"""``nlqo serve``'s app over a scripted model on a real uvicorn on a loopback port, and HTTP clients
for it (tests/test_serve*.py)."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading

from fakes import PASSAGES, HashEmbedder, KeywordRetriever

from nlqo.cli.serve import bind
from nlqo.config import EngineConfig
from nlqo.main.engine import Engine
from nlqo.runtime.llm import ScriptedLLM
from nlqo.serve.service import Service

QUESTION = "Who directed Jaws?"
JSON = "application/json"


class Gate:
    """An answer function that blocks until opened (the request holds its slot meanwhile)."""

    def __init__(self, answer: str = "Steven Spielberg"):
        self.answer, self.opened, self.entered = answer, threading.Event(), threading.Semaphore(0)
        self.waiting = 0

    def __call__(self, prompt: str) -> str:
        self.waiting += 1
        self.entered.release()
        self.opened.wait(30)
        return self.answer


def make_engine(reply=" Steven Spielberg", **options) -> tuple[Engine, ScriptedLLM]:
    llm = ScriptedLLM([], default=reply)
    config = EngineConfig(
        strategy="retrieve", measure_costs=False, cost_model="structural", max_question_chars=200, **options
    )
    return Engine.from_config(config, llm=llm, retriever=KeywordRetriever(PASSAGES), embedder=HashEmbedder()), llm


@contextlib.contextmanager
def serving(service: Service, **options):
    """The app of ``service`` on a free loopback port; yields (host, port). The socket listens before
    uvicorn starts, so a client may connect at once: the kernel holds the connection until it is served."""
    import uvicorn  # the serve extra: the tests that use it skip without it

    from nlqo.serve.app import create_app

    app = create_app(
        service,
        strategy="retrieve",
        strategies=("auto", "retrieve", "linear", "tree", "iterate", "cascade"),
        model="scripted",
        **options,
    )
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[:2]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def call(
    address,
    method: str,
    path: str,
    body=None,
    *,
    headers=None,
    raw: bytes | None = None,
    timeout: float = 30,
    content_type: str | None = JSON,
):
    """(status, headers, decoded JSON or text) of one request."""
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    sent = {"Content-Type": content_type} if content_type else {}
    conn.request(method, path, body=data, headers={**sent, **(headers or {})})
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    try:
        return response.status, dict(response.getheaders()), json.loads(text)
    except json.JSONDecodeError:
        return response.status, dict(response.getheaders()), text


def events(address, body, *, stop_after: int | None = None):
    """The server-sent events of a streamed ask, as (name, data); ``stop_after`` hangs up after that many."""
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.request("POST", "/v1/ask", body=json.dumps({**body, "stream": True}), headers={"Content-Type": JSON})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    out = read_events(response, stop_after=stop_after)
    if stop_after is not None and len(out) >= stop_after:
        conn.sock.shutdown(2)
    conn.close()
    return out


def read_events(response: http.client.HTTPResponse, *, stop_after: int | None = None):
    """(name, data) of each server-sent event of ``response``, up to ``stop_after``."""
    out, name = [], None
    while stop_after is None or len(out) < stop_after:
        line = response.fp.readline().decode()
        if not line:
            break
        line = line.rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[6:])))
    return out

"""The HTTP face of :class:`~nlqo.serve.service.Service`: a FastAPI application.

FastAPI because its request models give every malformed request a 4xx answer that names the field
(and the OpenAPI schema comes from the same models); uvicorn runs it. Endpoints: ``POST /v1/ask``
(``stream: true`` for server-sent events), ``POST /v1/explain``, ``POST /v1/retrieve``,
``GET /v1/health``, ``GET /v1/stats``, ``GET /metrics``, the console at ``/`` and the schema at
``/docs`` (a self-contained page: nothing is loaded from the network).
"""

from __future__ import annotations

import asyncio
import contextlib
import concurrent.futures
import hmac
import json
import logging
import time
from importlib import resources
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from nlqo.config import default
from nlqo.errors import LimitError, NlqoError, ParseFailure, QuestionError
from nlqo.parser.questions import check_question
from nlqo.serve.service import Busy, Cancelled, Closing, Service, Ticket
from nlqo.serve.stats import prometheus

log = logging.getLogger("nlqo.serve")

OPEN_PATHS = frozenset({"/", "/v1/health", "/docs", "/openapi.json"})
"""Paths answered without the bearer token: the console page (it asks for the token), the health
check load balancers poll, and the schema."""
RETRY_AFTER = 2
"""Seconds a refused client is told to wait (``Retry-After``)."""
POLL = 0.2
"""Seconds between checks that a waiting client is still connected."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AskRequest(_Request):
    question: str = Field(min_length=1, description="the question")
    strategy: str | None = Field(default=None, description="auto or one operator; the server's default when absent")
    explain: bool | Literal["json", "html"] = Field(
        default=False, description="add EXPLAIN ANALYZE: true or 'json' for JSON, 'html' for the page"
    )
    stream: bool = Field(default=False, description="server-sent events: each step as it completes, then the result")
    timeout: float | None = Field(default=None, gt=0, description="seconds; at most the server's --timeout")


class ExplainRequest(_Request):
    question: str = Field(min_length=1)
    strategy: str | None = None
    format: Literal["json", "html"] = "json"


class RetrieveRequest(_Request):
    query: str = Field(min_length=1)
    k: int = Field(default=default("k"), ge=1, le=50)


def create_app(
    service: Service,
    *,
    token: str | None = None,
    max_body: int = 65536,
    strategy: str = default("strategy"),
    strategies: tuple[str, ...] = (default("strategy"),),
    model: str = "",
    redact: tuple[str, ...] = (),
) -> FastAPI:
    """The application serving ``service``; ``token`` requires ``Authorization: Bearer TOKEN``;
    ``redact`` lists texts (paths) that never appear in an error message."""
    app = FastAPI(
        title="nlqo", summary="Question answering over your documents, with EXPLAIN.", docs_url=None, redoc_url=None
    )
    max_chars = service.engine.config.max_question_chars
    secrets = tuple(sorted((r for r in redact if r), key=len, reverse=True))

    def clean(message: str) -> str:
        for text in secrets:
            message = message.replace(text, "<server path>")
        return message

    def error(status: int, kind: str, message: str, **headers: str) -> JSONResponse:
        return JSONResponse(
            {"error": {"type": kind, "message": clean(message)}}, status_code=status, headers=headers or None
        )

    def failure(exc: BaseException) -> JSONResponse:
        """The HTTP answer to an exception raised by a request's work."""
        if isinstance(exc, Busy):
            return error(429, "busy", str(exc), **{"Retry-After": str(RETRY_AFTER)})
        if isinstance(exc, (Closing, asyncio.CancelledError, concurrent.futures.CancelledError)):
            return error(
                503,
                "closing",
                str(exc) or "the service shut down before the request ran",
                **{"Retry-After": str(RETRY_AFTER)},
            )
        if isinstance(exc, Cancelled):
            return error(504, "timeout", exc.reason)
        if isinstance(exc, LimitError):
            return error(413, "too_large", str(exc))
        if isinstance(exc, QuestionError):
            return error(400, "bad_question", str(exc))
        if isinstance(exc, ParseFailure):
            return error(422, "unparseable", str(exc))
        if isinstance(exc, NlqoError):
            log.error("request failed: %s", exc)
            return error(
                502, type(exc).__name__, "the model or the index failed on this request; the server log has the details"
            )
        log.exception("internal error", exc_info=exc)
        return error(500, "internal", "internal error; the server log has the details")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if token is not None and request.url.path not in OPEN_PATHS:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return error(
                    401,
                    "unauthorized",
                    "a bearer token is required: send 'Authorization: Bearer TOKEN' (nlqo serve --token)",
                    **{"WWW-Authenticate": "Bearer"},
                )
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body):
            return error(413, "too_large", f"the request body is larger than {max_body:,} bytes")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            if e.get("type") == "json_invalid":
                return error(
                    400, "bad_json", f"the body is not valid JSON: {e.get('ctx', {}).get('error', e.get('msg'))}"
                )
            problems.append(f"{where}: {e.get('msg')}")
        return error(422, "invalid", "; ".join(problems) or "the request does not match the schema (see /docs)")

    @app.exception_handler(NlqoError)
    async def refused(request: Request, exc: NlqoError) -> JSONResponse:
        return failure(exc)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        return failure(exc)

    def checked(question: str, name: str = "question") -> None:
        check_question(question, max_chars=max_chars, what=name)

    def strategy_of(given: str | None) -> str:
        if given is None:
            return strategy
        if given not in strategies:
            raise QuestionError(f"unknown strategy {given!r}; choose from {', '.join(strategies)}")
        return given

    def timeout_of(given: float | None) -> float:
        return min(given, service.timeout) if given is not None else service.timeout

    async def wait(request: Request, future, ticket: Ticket):
        """The work's result, or the HTTP answer when the client leaves, time runs out or the service closes."""
        waiting = asyncio.wrap_future(future)
        while True:
            done, _ = await asyncio.wait({waiting}, timeout=POLL)
            if done:
                try:
                    return waiting.result()
                except BaseException as exc:  # noqa: BLE001 - every failure gets its HTTP answer
                    return failure(exc)
            if await request.is_disconnected():
                ticket.cancel.set()
                return error(499, "cancelled", "the client disconnected")
            if time.monotonic() - ticket.started > ticket.timeout + 5 * POLL:
                ticket.cancel.set()
                return error(504, "timeout", f"the request took longer than its {ticket.timeout:g} s timeout")
            if service.past_grace():
                ticket.cancel.set()
                return error(
                    503,
                    "closing",
                    "the service shut down before the answer was ready; retry on another replica",
                    **{"Retry-After": str(RETRY_AFTER)},
                )

    @app.post(
        "/v1/ask",
        summary="Answer a question",
        response_description="the answer, its passages, the operator chosen and the timing",
    )
    async def ask(body: AskRequest, request: Request):
        checked(body.question)
        chosen = strategy_of(body.strategy)
        explain = None if body.explain is False else ("json" if body.explain is True else body.explain)
        ticket = Ticket(timeout=timeout_of(body.timeout))
        if body.stream:
            return stream(body.question, chosen, explain, ticket)
        future = service.submit(
            "ask", lambda: service.ask(body.question, strategy=chosen, explain=explain, ticket=ticket)
        )
        return await wait(request, future, ticket)

    def stream(question: str, chosen: str, explain: str | None, ticket: Ticket) -> StreamingResponse:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def emit(name: str, data: dict[str, Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the server stopped under a run
                loop.call_soon_threadsafe(events.put_nowait, (name, data))

        future = service.submit(
            "ask", lambda: service.ask(question, strategy=chosen, explain=explain, ticket=ticket, emit=emit)
        )
        future.add_done_callback(lambda f: emit("done", {}))

        async def frames():
            try:
                yield sse("accepted", {"question": question, "strategy": chosen})
                while True:
                    name, data = await events.get()
                    if name != "done":
                        yield sse(name, data)
                        continue
                    exc = future.exception()
                    if exc is None:
                        yield sse("result", future.result())
                    else:
                        answer = failure(exc)
                        yield sse("error", {"status": answer.status_code, **json.loads(bytes(answer.body))["error"]})
                    return
            finally:
                ticket.cancel.set()  # a client that left mid-stream stops the run at its next step

        return StreamingResponse(
            frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    @app.post("/v1/explain", summary="The physical plan of a question, not run")
    async def explain(body: ExplainRequest, request: Request):
        checked(body.question)
        chosen = strategy_of(body.strategy)
        ticket = Ticket(timeout=service.timeout)
        future = service.submit(
            "explain", lambda: service.explain(body.question, strategy=chosen, fmt=body.format, ticket=ticket)
        )
        return await wait(request, future, ticket)

    @app.post("/v1/retrieve", summary="The passages of the index that best match a query")
    async def retrieve(body: RetrieveRequest, request: Request):
        checked(body.query, "query")
        ticket = Ticket(timeout=service.timeout)
        future = service.submit("retrieve", lambda: service.retrieve(body.query, k=body.k, ticket=ticket))
        return await wait(request, future, ticket)

    @app.get("/v1/health", summary="Whether the service takes requests")
    async def health():
        status = "closing" if service.closing else "ok"
        return JSONResponse(
            {"status": status, "model": model, "strategy": strategy, "capacity": service.capacity},
            status_code=503 if service.closing else 200,
        )

    @app.get("/v1/stats", summary="Queue length, requests served, latency percentiles, tokens per second")
    async def stats():
        return service.snapshot()

    @app.get("/metrics", summary="The same numbers in the Prometheus text format", response_class=PlainTextResponse)
    async def metrics():
        return PlainTextResponse(prometheus(service.snapshot()), media_type="text/plain; version=0.0.4")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def console():
        return HTMLResponse(resources.files("nlqo.serve").joinpath("console.html").read_text(encoding="utf-8"))

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs():
        return HTMLResponse(schema_page(app.openapi()))

    return app


def sse(name: str, data: dict[str, Any]) -> str:
    """One server-sent event.

    >>> sse("step", {"node": "q1"})
    'event: step\\ndata: {"node": "q1"}\\n\\n'
    """
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def schema_page(schema: dict[str, Any]) -> str:
    """The OpenAPI schema as one self-contained HTML page: each endpoint, then the schema itself."""
    from html import escape

    rows = []
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            rows.append(
                f"<tr><td><code>{escape(method.upper())}</code></td><td><code>{escape(path)}</code></td><td>{escape(op.get('summary', ''))}</td></tr>"
            )
    body = escape(json.dumps(schema, indent=2))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>nlqo API</title>"
        "<style>body{font:15px system-ui,sans-serif;margin:2em;max-width:70em}td{padding:.2em 1em .2em 0}pre{background:#f4f4f4;padding:1em;overflow:auto}</style>"
        f"</head><body><h1>nlqo API</h1><p>The OpenAPI schema, also as JSON at <a href='/openapi.json'>/openapi.json</a>.</p>"
        f"<table>{''.join(rows)}</table><h2>Schema</h2><pre>{body}</pre></body></html>"
    )

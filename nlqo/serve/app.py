"""The HTTP face of :class:`~nlqo.serve.service.Service`: a FastAPI application.

FastAPI because its request models give every malformed request a 4xx answer that names the field
(and the OpenAPI schema comes from the same models); uvicorn runs it. Endpoints: ``POST /v1/ask``
(``stream: true`` for server-sent events), ``POST /v1/explain``, ``POST /v1/retrieve``,
``GET /v1/health``, ``GET /v1/stats``, ``GET /metrics``, the console at ``/`` and the schema at
``/docs``. Every request first passes :class:`~nlqo.serve.guard.Guard`; every error, whatever its
status, has the shape of :mod:`~nlqo.serve.replies`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from importlib import resources
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from nlqo.config import default
from nlqo.errors import LimitError, NlqoError, QuestionError
from nlqo.parser.questions import check_question
from nlqo.serve.access import Access
from nlqo.serve.guard import Guard, disconnected
from nlqo.serve.replies import Replies
from nlqo.serve.schema_page import schema_page
from nlqo.serve.service import POLL, Service
from nlqo.serve.stats import prometheus
from nlqo.serve.stream import stream
from nlqo.serve.ticket import Cancelled, Ticket


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class AskRequest(_Request):
    question: str = Field(description="the question")
    strategy: str | None = Field(default=None, description="auto or one operator; the server's default when absent")
    explain: bool | Literal["json", "html"] = Field(
        default=False, description="add EXPLAIN ANALYZE: true or 'json' for JSON, 'html' for the page"
    )
    stream: bool = Field(default=False, description="server-sent events: each step as it completes, then the result")
    timeout: float | None = Field(default=None, gt=0, description="seconds; at most the server's --timeout")


class ExplainRequest(_Request):
    question: str
    strategy: str | None = None
    format: Literal["json", "html"] = "json"


class RetrieveRequest(_Request):
    query: str
    k: int = Field(default=default("k"), ge=1, le=50)


def create_app(
    service: Service,
    *,
    token: str | None = None,
    allow_hosts: Iterable[str] = (),
    max_body: int = 65536,
    strategy: str = default("strategy"),
    strategies: tuple[str, ...] = (default("strategy"),),
    model: str = "",
    redact: tuple[str, ...] = (),
) -> FastAPI:
    """The application serving ``service``. ``token`` requires ``Authorization: Bearer TOKEN``; without
    one, only requests for a loopback host name or one of ``allow_hosts`` are served. ``redact`` lists
    texts (paths) that never appear in an error message."""
    app = FastAPI(
        title="nlqo", summary="Question answering over your documents, with EXPLAIN.", docs_url=None, redoc_url=None
    )
    max_chars = service.engine.config.max_question_chars
    replies = Replies.hiding(redact)
    app.add_middleware(Guard, access=Access.of(token, allow=allow_hosts), replies=replies, max_body=max_body)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for e in exc.errors():
            where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
            if e.get("type") == "json_invalid":
                why = e.get("ctx", {}).get("error", e.get("msg"))
                return replies.error(400, "bad_json", f"the body is not valid JSON: {why}")
            problems.append(f"{where}: {e.get('msg')}")
        return replies.error(422, "invalid", "; ".join(problems) or "the request does not match the schema (see /docs)")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        where = f"{request.method} {request.url.path}"
        if exc.status_code == 404:
            return replies.error(404, "not_found", f"no endpoint {request.url.path}; /docs lists them", **headers)
        if exc.status_code == 405:
            allowed = headers.get("Allow") or headers.get("allow") or "another method"
            return replies.error(405, "method_not_allowed", f"{where} is not served; use {allowed}", **headers)
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, UnicodeDecodeError):
            message = f"the body is not valid JSON: byte {cause.start} (0x{cause.object[cause.start]:02x}) is not UTF-8"
            return replies.error(400, "bad_json", message)
        return replies.error(exc.status_code, "bad_request", f"{where}: {exc.detail}", **headers)

    @app.exception_handler(NlqoError)
    async def refused(request: Request, exc: NlqoError) -> JSONResponse:
        return replies.failure(exc)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        return replies.failure(exc)

    def checked(text: str, what: str = "question") -> None:
        if len(text) > max_chars:
            raise LimitError(
                f"the {what} has {len(text):,} characters, more than {max_chars:,}, the most this server takes "
                "(nlqo serve --max-question-chars); shorten it, or split it into questions"
            )
        check_question(text, what=what)

    def strategy_of(given: str | None) -> str:
        if given is None:
            return strategy
        if given not in strategies:
            raise QuestionError(f"unknown strategy {given!r}; choose from {', '.join(strategies)}")
        return given

    async def wait(request: Request, future, ticket: Ticket) -> Response:
        """The work's result, or the HTTP answer when the client leaves, time runs out or the service closes."""
        waiting = asyncio.wrap_future(future)
        left = asyncio.ensure_future(disconnected(request.scope).wait())
        try:
            while True:
                done, _ = await asyncio.wait({waiting, left}, timeout=POLL, return_when=asyncio.FIRST_COMPLETED)
                if waiting in done:
                    try:
                        return waiting.result()
                    except BaseException as exc:  # noqa: BLE001 - every failure gets its HTTP answer
                        return replies.failure(exc)
                reason = Cancelled("the client disconnected") if left in done else service.given_up(ticket)
                if reason is None:
                    continue
                service.cancel(future, ticket, reason)
                return replies.failure(reason)
        finally:
            left.cancel()

    @app.post(
        "/v1/ask",
        summary="Answer a question",
        response_description="the answer, its passages, the operator chosen and the timing",
    )
    async def ask(body: AskRequest, request: Request):
        checked(body.question)
        chosen = strategy_of(body.strategy)
        explain = None if body.explain is False else ("json" if body.explain is True else body.explain)
        ticket = Ticket(timeout=service.timeout if body.timeout is None else min(body.timeout, service.timeout))
        if body.stream:
            return stream(service, replies, body.question, strategy=chosen, explain=explain, ticket=ticket)
        future = service.submit(
            "ask", lambda: service.ask(body.question, strategy=chosen, explain=explain, ticket=ticket), ticket
        )
        return await wait(request, future, ticket)

    @app.post("/v1/explain", summary="The physical plan of a question, not run")
    async def explain(body: ExplainRequest, request: Request):
        checked(body.question)
        chosen = strategy_of(body.strategy)
        ticket = Ticket(timeout=service.timeout)
        future = service.submit(
            "explain", lambda: service.explain(body.question, strategy=chosen, fmt=body.format, ticket=ticket), ticket
        )
        return await wait(request, future, ticket)

    @app.post("/v1/retrieve", summary="The passages of the index that best match a query")
    async def retrieve(body: RetrieveRequest, request: Request):
        checked(body.query, "query")
        ticket = Ticket(timeout=service.timeout)
        future = service.submit("retrieve", lambda: service.retrieve(body.query, k=body.k, ticket=ticket), ticket)
        return await wait(request, future, ticket)

    @app.get("/v1/health", summary="Whether the service takes requests")
    async def health():
        status = "closing" if service.closing else "ok"
        return JSONResponse(
            {"status": status, "model": model, "strategy": strategy, "capacity": service.capacity},
            status_code=503 if service.closing else 200,
        )

    @app.get(
        "/v1/stats",
        summary="Queue length, requests by outcome (ok, busy, timeout, cancelled, ...), latency, tokens per second",
    )
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

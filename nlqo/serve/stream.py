"""A streamed ``POST /v1/ask``: server-sent events, each trace step as it completes, then the result."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from starlette.responses import StreamingResponse

from nlqo.serve.replies import Replies
from nlqo.serve.service import POLL, Closing, Service
from nlqo.serve.ticket import Cancelled, Ticket


def sse(name: str, data: dict[str, Any]) -> str:
    """One server-sent event.

    >>> sse("step", {"node": "q1"})
    'event: step\\ndata: {"node": "q1"}\\n\\n'
    """
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def stream(
    service: Service, replies: Replies, question: str, *, strategy: str, explain: str | None, ticket: Ticket
) -> StreamingResponse:
    """Submit the question (:class:`~nlqo.serve.service.Busy` and ``Closing`` are raised at once) and
    stream its run: ``accepted``, ``plan``, one ``step`` each, ``answer``, then ``result`` or ``error``.
    A stream still open when the shutdown's grace ends (or long past its timeout) ends with an
    ``error`` event too, and its run is stopped."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def emit(name: str, data: dict[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the server stopped under a run
            loop.call_soon_threadsafe(events.put_nowait, (name, data))

    future = service.submit(
        "ask", lambda: service.ask(question, strategy=strategy, explain=explain, ticket=ticket, emit=emit), ticket
    )
    future.add_done_callback(lambda f: emit("done", {}))

    def error(exc: BaseException) -> str:
        answer = replies.failure(exc)
        return sse("error", {"status": answer.status_code, **json.loads(bytes(answer.body))["error"]})

    async def frames():
        try:
            yield sse("accepted", {"question": question, "strategy": strategy})
            while True:
                try:
                    name, data = await asyncio.wait_for(events.get(), POLL)
                except asyncio.TimeoutError:
                    if (reason := service.given_up(ticket)) is None:
                        continue
                    service.cancel(future, ticket, reason)
                    yield error(reason)
                    return
                if name != "done":
                    yield sse(name, data)
                    continue
                exc: BaseException | None = (
                    Closing("the service shut down before the request ran")
                    if future.cancelled()
                    else future.exception()
                )
                yield sse("result", future.result()) if exc is None else error(exc)
                return
        finally:
            if not future.done() and ticket.reason is None:  # the client left mid-stream: the run stops within a token
                service.cancel(future, ticket, Cancelled("the client disconnected"))

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )

"""What a request passes before the app sees it, as pure ASGI middleware: :mod:`~nlqo.serve.access`,
a JSON Content-Type on a POST, and the body, read within ``max_body`` bytes as it arrives (chunked or
not: past the limit the answer is 413 and the rest is not read).

After the body it watches the connection: :func:`disconnected` is an event set when the client goes
away, and the app's ``receive`` says ``http.disconnect`` then. Starlette's ``BaseHTTPMiddleware`` would
hide that from the app (``Request.is_disconnected`` stays False), so a request whose client gave up
would hold its slot or its place in the queue.
"""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from nlqo.serve.access import Access
from nlqo.serve.replies import Replies

DISCONNECTED = "nlqo.disconnected"
"""The scope key of the event :func:`disconnected` returns."""


def disconnected(scope: Scope) -> asyncio.Event:
    """The event set when the client of the request of ``scope`` goes away."""
    return scope[DISCONNECTED]


def json_media(content_type: str | None) -> bool:
    """True for a JSON media type.

    >>> json_media("application/json; charset=utf-8"), json_media("application/x+json"), json_media("text/plain")
    (True, True, False)
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class TooLarge(Exception):
    """The body passed the limit."""


class Gone(Exception):
    """The client went away while sending the body."""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The request's body; :class:`TooLarge` as soon as it passes ``limit`` bytes, :class:`Gone` when the client leaves."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def watch(receive: Receive, left: asyncio.Event) -> None:
    """Set ``left`` when ``receive`` says the client went away (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    left.set()


def replay(body: bytes, left: asyncio.Event) -> Receive:
    """A ``receive`` for the app: ``body``, then ``http.disconnect`` once ``left`` is set."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        if pending:
            return pending.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    return receive


@attrs.define(eq=False)
class Guard:
    """Pure ASGI middleware in front of ``app`` (``FastAPI.add_middleware(Guard, ...)``)."""

    app: ASGIApp
    access: Access
    replies: Replies
    max_body: int

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        try:
            body = await read_body(receive, self.max_body)
        except TooLarge:
            await self.too_large()(scope, receive, send)
            return
        except Gone:
            return
        left = asyncio.Event()
        watcher = asyncio.ensure_future(watch(receive, left))
        try:
            await self.app({**scope, DISCONNECTED: left}, replay(body, left), send)
        finally:
            watcher.cancel()

    def refusal(self, scope: Scope) -> Response | None:
        """The answer to a request refused on its headers alone, before its body is read."""
        headers = Headers(scope=scope)
        refused = self.access.refusal(scope["path"], headers.get("host"), headers.get("authorization", ""))
        if refused is not None:
            return self.closing(refused.status, refused.kind, refused.message, **dict(refused.headers))
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            return self.too_large()
        if scope["method"] == "POST" and not json_media(headers.get("content-type")):
            given = headers.get("content-type")
            return self.closing(
                415,
                "unsupported_media_type",
                f"the body must be JSON: send Content-Type: application/json (this request sent {(given or 'none')[:100]})",
            )
        return None

    def too_large(self) -> Response:
        return self.closing(413, "too_large", f"the request body is larger than {self.max_body:,} bytes (--max-body)")

    def closing(self, status: int, kind: str, message: str, **headers: Any) -> Response:
        """An error answer that closes the connection: the body it may carry is not read."""
        return self.replies.error(status, kind, message, Connection="close", **headers)

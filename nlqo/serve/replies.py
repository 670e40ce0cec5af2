"""The one shape of every error the service answers, whatever its status:
``{"error": {"type": ..., "message": ...}}``, with the server's paths redacted from the message."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Iterable

import attrs
from starlette.responses import JSONResponse

from nlqo.errors import LimitError, NlqoError, ParseFailure, QuestionError
from nlqo.serve.service import Busy, Closing
from nlqo.serve.ticket import Cancelled, TimedOut

log = logging.getLogger("nlqo.serve")

RETRY_AFTER = 2
"""Seconds a refused client is told to wait (``Retry-After``)."""


@attrs.frozen
class Replies:
    """Error answers that never show ``secrets`` (the index, model and cache paths)."""

    secrets: tuple[str, ...] = ()
    """Texts replaced by ``<server path>`` in every message, longest first."""

    @classmethod
    def hiding(cls, texts: Iterable[str]) -> Replies:
        return cls(tuple(sorted((t for t in texts if t), key=len, reverse=True)))

    def clean(self, message: str) -> str:
        """``message`` without the secrets.

        >>> Replies.hiding(["/srv/idx"]).clean("cannot read /srv/idx/vectors")
        'cannot read <server path>/vectors'
        """
        for text in self.secrets:
            message = message.replace(text, "<server path>")
        return message

    def error(self, status: int, kind: str, message: str, **headers: str) -> JSONResponse:
        return JSONResponse(
            {"error": {"type": kind, "message": self.clean(message)}}, status_code=status, headers=headers or None
        )

    def failure(self, exc: BaseException) -> JSONResponse:
        """The HTTP answer to an exception raised by a request's work."""
        retry = {"Retry-After": str(RETRY_AFTER)}
        if isinstance(exc, Busy):
            return self.error(429, "busy", str(exc), **retry)
        if isinstance(exc, (Closing, asyncio.CancelledError, concurrent.futures.CancelledError)):
            return self.error(503, "closing", str(exc) or "the service shut down before the request ran", **retry)
        if isinstance(exc, TimedOut):
            return self.error(504, "timeout", exc.reason)
        if isinstance(exc, Cancelled):
            return self.error(499, "cancelled", exc.reason)
        if isinstance(exc, LimitError):
            return self.error(413, "too_large", str(exc))
        if isinstance(exc, QuestionError):
            return self.error(400, "bad_question", str(exc))
        if isinstance(exc, ParseFailure):
            return self.error(422, "unparseable", str(exc))
        if isinstance(exc, NlqoError):
            log.error("request failed: %s", exc)
            message = "the model or the index failed on this request; the server log has the details"
            return self.error(502, type(exc).__name__, message)
        log.exception("internal error", exc_info=exc)
        return self.error(500, "internal", "internal error; the server log has the details")

"""A request's deadline and cancel switch, checked by the run at every trace step and by the backends per token."""

from __future__ import annotations

import threading
import time

import attrs

from nlqo.errors import NlqoError


class Cancelled(NlqoError):
    """The answer is no longer wanted: the client went away; ``reason`` says so."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TimedOut(Cancelled):
    """The request ran past its timeout (HTTP 504)."""


@attrs.define
class Ticket:
    """One request's deadline and cancel switch."""

    timeout: float
    """Seconds the request may take, from ``started``."""
    cancel: threading.Event = attrs.field(factory=threading.Event)
    """Set when the answer is no longer wanted."""
    started: float = attrs.field(factory=time.monotonic)
    reason: NlqoError | None = None
    """Why the answer is no longer wanted (what the run raises, and what the stats count), once it is not."""
    steps: list = attrs.field(factory=list, repr=False)
    """The run's trace steps as they are recorded: a request that ends without an answer has its
    finished generations' tokens counted from them."""

    def stop(self, reason: NlqoError) -> None:
        """Stop the run at its next check, with ``reason``."""
        self.reason = reason
        self.cancel.set()

    def check(self) -> None:
        """Raise the reason to stop, if there is one.

        >>> Ticket(timeout=60).check()
        >>> Ticket(timeout=-1).check()
        Traceback (most recent call last):
        ...
        nlqo.serve.ticket.TimedOut: the request took longer than its -1 s timeout
        """
        if self.cancel.is_set():
            raise self.reason or Cancelled("the client disconnected")
        if self.expired():
            raise TimedOut(f"the request took longer than its {self.timeout:g} s timeout")

    def expired(self, margin: float = 0.0) -> bool:
        """True once the deadline, plus ``margin`` seconds, has passed."""
        return time.monotonic() - self.started > self.timeout + margin

"""Interrupting a running generation: the cancel check a caller puts in scope and the backends'
decode loops consult before each token.

A caller that may give up on its work (``nlqo serve``: a client gone, a timeout) runs it inside
:func:`cancel_scope` with a check, a function that raises the reason to stop and otherwise returns.
The check is context-local (a :class:`contextvars.ContextVar`), so requests running at once on one
engine each see their own; code that hands work to other threads carries the context with it
(``contextvars.copy_context().run``, as the tree executor does for its nodes). Each backend calls
:func:`current` when a call starts and consults that check per token: the transformers and llama.cpp
loops before each decode step (llama.cpp's scheduler thread, which serves every caller, consults the
check the request carries), the OpenAI-compatible backend while it waits for the server's reply (it
closes the connection), the scripted double per word. What the check raises ends the call; the
backend stays usable for the next one.

>>> def stop():
...     raise TimeoutError("too late")
>>> with cancel_scope(stop):
...     check_cancelled()
Traceback (most recent call last):
...
TimeoutError: too late
>>> check_cancelled()  # outside a scope nothing is checked
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

Check = Callable[[], None]
"""Raises the reason to stop when the work is no longer wanted; returns otherwise. Cheap: it is
called once per generated token."""

_CHECK: contextvars.ContextVar[Check | None] = contextvars.ContextVar("nlqo_cancel_check", default=None)


@contextlib.contextmanager
def cancel_scope(check: Check) -> Iterator[None]:
    """Run the block with ``check`` as the cancel check of every generation it starts."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def current() -> Check | None:
    """The cancel check in scope (None: the work is never interrupted)."""
    return _CHECK.get()


def check_cancelled() -> None:
    """Raise the reason to stop when the check in scope says so."""
    check = _CHECK.get()
    if check is not None:
        check()

"""One generation request and how its tokens are chosen and taken: greedy, under the request's
grammar when it has one (:mod:`nlqo.runtime.llm.constrain`: the logits are masked before the argmax, and the
tokens the grammar forces are appended without sampling), ended by an end-of-generation token, a
stop string, the grammar, or a length limit."""

from __future__ import annotations

import collections
import threading
from typing import Callable, Sequence

import attrs
import numpy as np

from nlqo.errors import LLMError
from nlqo.runtime.llm.base import cut_at_stop
from nlqo.runtime.llm.confidence import Tally
from nlqo.runtime.llm.constrain import Matcher


@attrs.define(eq=False)
class Slot:
    """One KV sequence of the context and the tokens whose state it holds (positions 0..n-1)."""

    seq: int
    tokens: tuple[int, ...] = ()
    owner: int = -1
    """The handle (:meth:`LlamaCppLLM.fork`) that used it last; only that handle reuses its tokens."""
    busy: bool = False
    used: int = 0


@attrs.define(eq=False)
class Request:
    owner: int
    saved: "collections.OrderedDict[tuple[int, ...], bytes]"
    saved_size: int
    ids: list[int]
    reuse: bool
    remember: int
    """Save the KV state of the first ``remember`` prompt tokens (0: none)."""
    stop: Sequence[str]
    max_tokens: int
    matcher: Matcher | None = None
    """The request's grammar state (None: unconstrained)."""
    slot: Slot | None = None
    pos: int = 0
    """Tokens (prompt, then generated) whose KV state is in the slot."""
    cached: int = 0
    generated: list[int] = attrs.Factory(list)
    """Reply tokens: chosen ones and, with a grammar, forced ones (the last ones may wait to be computed)."""
    pieces: bytearray = attrs.Factory(bytearray)
    text: str = ""
    finish: str = "stop"
    error: BaseException | None = None
    done: threading.Event = attrs.Factory(threading.Event)
    tally: Tally = attrs.Factory(Tally)
    """The chosen tokens' log-probabilities and entropies (:mod:`nlqo.runtime.llm.confidence`)."""
    check: Callable[[], None] | None = None
    """The caller's cancel check (:mod:`nlqo.runtime.llm.cancel`), consulted by the scheduler thread
    before each step; None: the request is never interrupted."""

    def stopped(self) -> bool:
        """Whether the caller gave up on the request: its check raised, and what it raised is now ``error``."""
        if self.check is None:
            return False
        try:
            self.check()
        except BaseException as exc:  # noqa: BLE001 - the reason to stop, raised to the caller by its own thread
            self.error = exc
            return True
        return False

    @property
    def prefilling(self) -> bool:
        return self.pos < len(self.ids)

    @property
    def seq(self) -> int:
        """The KV sequence of the request's slot (it has one once admitted)."""
        if self.slot is None:
            raise LLMError("internal: a request without a slot reached the decoder")
        return self.slot.seq


def choose(r: Request, logits: np.ndarray) -> int:
    """The greedy token among those ``r``'s grammar allows (any token without one); the lowest id
    wins a tie, so the choice does not depend on what else was in the batch. A grammar that cannot
    go on raises :class:`~nlqo.errors.LLMError`. The distribution is read for the reply's
    confidence first, unconstrained (the grammar masks ``logits`` in place)."""
    return r.tally.choose(logits, len(r.generated), None if r.matcher is None else r.matcher.choose)


def take(r: Request, token: int, *, piece: Callable[[int], bytes], is_end: Callable[[int], bool], n_ctx: int) -> bool:
    """Append the chosen ``token`` to ``r``, and the tokens its grammar forces after it; True when
    ``r`` is finished (its ``text`` and ``finish`` set)."""
    r.generated.append(token)
    if is_end(token):
        r.text, r.finish = bytes(r.pieces).decode("utf-8", "replace"), "stop"
        return True
    r.pieces += piece(token)
    if r.matcher is not None:
        r.matcher.advance(token)
        for t in r.matcher.forced(r.max_tokens - len(r.generated)):
            r.generated.append(t)
            r.pieces += piece(t)
    text = bytes(r.pieces).decode("utf-8", "ignore")
    cut, hit = cut_at_stop(text, r.stop)
    if hit or (r.matcher is not None and r.matcher.done):
        r.text, r.finish = cut, "stop"
        return True
    if len(r.generated) >= r.max_tokens or len(r.ids) + len(r.generated) >= n_ctx:
        r.text, r.finish = bytes(r.pieces).decode("utf-8", "replace"), "length"
        return True
    return False

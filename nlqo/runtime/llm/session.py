"""Sessions: a growing text that fixed segments are appended to and the model continues.

Backends that declare ``Capabilities(session=True)`` (the local transformers backend) provide ``llm.session(prefix)``
that keeps the model state between calls. :class:`TextSession` is the fallback for every other
backend: it keeps only the text and sends all of it on each generation, so nothing is served from
a cache (this is also the "KV reuse off" ablation).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import attrs

from nlqo.config import default
from nlqo.runtime.llm.base import LLM, Completion, capabilities


@runtime_checkable
class Session(Protocol):
    @property
    def text(self) -> str: ...

    def append(self, text: str) -> object:
        """Add fixed text without sampling; its computation is accounted by the next generation."""
        ...

    def generate(self, *, stop: Sequence[str] = (), max_tokens: int = 64) -> Completion:
        """Generate and keep the generated text (without the stop string) in the session."""
        ...

    def fork(self) -> "Session": ...


@runtime_checkable
class TokenSession(Session, Protocol):
    """A session over token ids with a live KV state (the local backends' sessions)."""

    @property
    def token_ids(self) -> tuple[int, ...]: ...

    def truncate(self, length: int) -> None:
        """Forget every token after the first ``length``."""
        ...


@attrs.define(eq=False)
class TextSession:
    """A session over ``llm.complete``: every generation recomputes the whole prompt."""

    llm: LLM
    _text: str = ""

    @property
    def text(self) -> str:
        return self._text

    def append(self, text: str) -> None:
        self._text += text

    def generate(self, *, stop: Sequence[str] = (), max_tokens: int = 64) -> Completion:
        out = self.llm.complete(self._text, stop=stop, max_tokens=max_tokens)
        self._text += out.text
        return out

    def fork(self) -> "TextSession":
        return TextSession(self.llm, self._text)


def open_session(llm: LLM, prefix: str, *, kv_reuse: bool = default("kv_reuse")) -> Session:
    """A KV session when the backend declares sessions and ``kv_reuse`` is on; a :class:`TextSession` otherwise."""
    if kv_reuse and capabilities(llm).session:
        return llm.session(prefix)  # type: ignore[attr-defined]
    session = TextSession(llm)
    session.append(prefix)
    return session

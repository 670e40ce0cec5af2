"""An on-disk response cache around any :class:`~nlqo.runtime.llm.base.LLM`.

One JSON file per entry under ``<directory>/<2 hex>/<sha256>.json``, written to a temporary file
in the same folder and moved into place with ``os.replace``, so concurrent writers (threads or
processes) never leave a torn entry: the last complete write wins. Use it for repeatable
evaluation; leave it off for timing runs (the caller decides by wrapping or not, see
:func:`with_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import attrs

from nlqo.common.storage import replace_atomically
from nlqo.runtime.llm.base import (
    LLM,
    Capabilities,
    ChatMessage,
    Completion,
    Usage,
    cache_identity,
    capabilities,
    chat_reusing_prefix,
    close_part,
    complete_reusing_prefix,
    forked,
)
from nlqo.runtime.llm.confidence import Confidence
from nlqo.runtime.llm.constrain import Constraint, can_constrain, constrained_chat

FORMAT = 1
"""Bumped when the key or entry layout changes; old entries then simply miss."""


@attrs.frozen
class CachedCompletion(Completion):
    """A completion replayed from the cache.

    ``usage`` keeps the original call's token counts and ``calls`` (so token metrics of a warm
    run equal those of the cold run) but its ``wall_ms`` is the time of the cache lookup.
    ``original_usage`` is the usage recorded when the entry was generated.
    """

    original_usage: Usage = Usage()
    cache_hit: bool = True


def is_cache_hit(completion: Completion) -> bool:
    """Whether ``completion`` was served from a :class:`CachedLLM` instead of the backend."""
    return isinstance(completion, CachedCompletion)


def request_key(
    llm: LLM, method: str, payload: Any, stop: Sequence[str], max_tokens: int, constraint: Constraint | None = None
) -> tuple[str, Any]:
    """The stable hash of a request and the request as stored (JSON-normalised).

    The key covers the backend name, its declared ``cache_identity()`` (model and generation
    settings; ``{}`` for a backend that declares none), the method, the prompt or messages, the
    stop strings (as a set), ``max_tokens`` and the constraint's key when there is one.

    >>> from nlqo.runtime.llm.scripted import ScriptedLLM
    >>> a, _ = request_key(ScriptedLLM([]), "complete", "Hi", ["\\n"], 8)
    >>> b, _ = request_key(ScriptedLLM([]), "complete", "Hi", ["\\n"], 9)
    >>> len(a), a == b
    (64, False)
    """
    identity = cache_identity(llm)
    request = {
        "format": FORMAT,
        "backend": llm.name,
        "identity": identity,
        "method": method,
        "input": payload,
        "stop": sorted(set(stop)),
        "max_tokens": max_tokens,
    }
    if constraint is not None:
        request["constraint"] = constraint.key()
    blob = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest(), json.loads(blob)


@attrs.define(eq=False)
class CachedLLM:
    """Serve repeated requests to ``inner`` from files under ``directory``.

    Nothing touches the disk until the first call. Errors are never cached. Two threads that
    miss on the same key at once both ask the backend; both write the same entry.

    >>> import tempfile
    >>> from nlqo.runtime.llm.scripted import ScriptedLLM
    >>> llm = CachedLLM(ScriptedLLM([("capital", "Paris")]), tempfile.mkdtemp())
    >>> first, again = llm.complete("The capital is"), llm.complete("The capital is")
    >>> is_cache_hit(first), is_cache_hit(again), again.text, len(llm.inner.calls)
    (False, True, 'Paris', 1)
    """

    inner: LLM
    directory: Path = attrs.field(converter=Path)
    hits: int = attrs.field(default=0, init=False)
    misses: int = attrs.field(default=0, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def capabilities(self) -> Capabilities:
        """The backend's, with prefix caching and forking always on offer (they pass through), and
        its way of applying constraints (replies are cached per constraint)."""
        inner = capabilities(self.inner)
        return Capabilities(
            prefix_cache=True, fork=True, concurrency=inner.concurrency, server_slots=inner.server_slots,
            cache_identity=inner.cache_identity, constraint=inner.constraint,
        )  # fmt: skip

    def cache_identity(self) -> dict[str, Any]:
        return cache_identity(self.inner)

    def close(self) -> None:
        """Close the backend (the disk cache holds no open files)."""
        close_part(self.inner)

    def server_slots(self) -> int | None:
        """The server's reported slots (declared only when the backend is a server)."""
        return self.inner.server_slots()  # type: ignore[attr-defined]

    def complete(
        self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256, prefix_cache: bool = False
    ) -> Completion:
        """A stored answer, or the backend's (asked to reuse its prefix KV cache when ``prefix_cache``)."""
        key, request = request_key(self.inner, "complete", prompt, stop, max_tokens)
        if prefix_cache:
            return self._serve(
                key, request, lambda: complete_reusing_prefix(self.inner, prompt, stop=stop, max_tokens=max_tokens)
            )
        return self._serve(key, request, lambda: self.inner.complete(prompt, stop=stop, max_tokens=max_tokens))

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] = (),
        max_tokens: int = 256,
        prefix_cache: bool = False,
        constraint: Constraint | None = None,
    ) -> Completion:
        """A stored answer, or the backend's (asked to reuse its prefix KV cache when ``prefix_cache``,
        and to follow ``constraint`` when given; a stored reply counts as unconstrained)."""
        payload = [{"role": m.role, "content": m.content} for m in messages]
        if constraint is not None and can_constrain(self.inner):
            key, request = request_key(self.inner, "chat", payload, stop, max_tokens, constraint)
            ask = lambda: constrained_chat(
                self.inner, messages, constraint, stop=stop, max_tokens=max_tokens, prefix_cache=prefix_cache
            )  # noqa: E731
            return self._serve(key, request, ask)
        key, request = request_key(self.inner, "chat", payload, stop, max_tokens)
        if prefix_cache:
            return self._serve(
                key, request, lambda: chat_reusing_prefix(self.inner, messages, stop=stop, max_tokens=max_tokens)
            )
        return self._serve(key, request, lambda: self.inner.chat(messages, stop=stop, max_tokens=max_tokens))

    def fork(self) -> "CachedLLM":
        """The same cache folder over a fork of the backend (its own prefix KV cache) when it can
        fork, else over the backend itself; hit and miss counts start at zero."""
        return CachedLLM(forked(self.inner), self.directory)

    def path_of(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def _serve(self, key: str, request: Any, call: Callable[[], Completion]) -> Completion:
        start = time.perf_counter()
        entry = self._load(key, request)
        if entry is not None:
            with self._lock:
                self.hits += 1
            lookup_ms = (time.perf_counter() - start) * 1000.0
            original = Usage(**entry["usage"])
            return CachedCompletion(
                text=entry["text"],
                usage=attrs.evolve(original, wall_ms=lookup_ms),
                finish_reason=entry["finish_reason"],
                confidence=_confidence(entry),
                original_usage=original,
            )
        with self._lock:
            self.misses += 1
        completion = call()
        self._store(key, request, completion)
        return completion

    def _load(self, key: str, request: Any) -> Mapping[str, Any] | None:
        """The stored entry, or None when absent, unreadable or for another request."""
        try:
            entry = json.loads(self.path_of(key).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("request") != request:
            return None
        if not isinstance(entry.get("text"), str) or not isinstance(entry.get("usage"), dict):
            return None
        return entry

    def _store(self, key: str, request: Any, completion: Completion) -> None:
        entry = {
            "request": request,
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "usage": attrs.asdict(completion.usage),
            "created": time.time(),
        }
        if completion.confidence is not None:
            entry["confidence"] = completion.confidence.to_dict()
            if completion.confidence.detail is not None:
                entry["confidence_tokens"] = completion.confidence.detail.to_dict()
        replace_atomically(self.path_of(key), json.dumps(entry, ensure_ascii=False), prefix=f".{key[:12]}.")


def _confidence(entry: Mapping[str, Any]) -> Confidence | None:
    """The stored reply's confidence (None for an entry written without one, or a bad one)."""
    if not isinstance(entry.get("confidence"), dict):
        return None
    try:
        return Confidence.from_dict(entry["confidence"], entry.get("confidence_tokens"))
    except (KeyError, TypeError, ValueError):
        return None


def with_cache(llm: LLM, directory: str | os.PathLike[str] | None) -> LLM:
    """``llm`` wrapped in a :class:`CachedLLM` over ``directory``, or unchanged when it is None."""
    return llm if directory is None else CachedLLM(llm, directory)


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$NLQO_CACHE_DIR``, else ``$XDG_CACHE_HOME/nlqo/llm``, else ``~/.cache/nlqo/llm``.

    >>> default_cache_dir({"NLQO_CACHE_DIR": "/tmp/c"}).name
    'c'
    """
    env = os.environ if env is None else env
    if env.get("NLQO_CACHE_DIR"):
        return Path(env["NLQO_CACHE_DIR"])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nlqo" / "llm"

"""The interface every LLM backend implements, what it declares it can do, and its accounting values."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import attrs

if TYPE_CHECKING:
    from nlqo.runtime.llm.confidence import Confidence


@attrs.frozen
class Capabilities:
    """What a backend declares beyond ``complete`` and ``chat``; the engine reads this, never probes.

    A backend without a ``capabilities`` attribute has none of them (this value's defaults).
    """

    prefix_cache: bool = False
    """``complete`` and ``chat`` accept ``prefix_cache=True`` and then reuse the KV state of a
    prompt prefix computed before."""
    session: bool = False
    """``session(prefix)`` returns a :class:`nlqo.runtime.llm.session.Session` that keeps its KV state
    between generations (the linear template's KV reuse)."""
    fork: bool = False
    """``fork()`` returns a backend on the same weights with its own prefix cache (benchmarks give
    each strategy one so that no strategy's timing depends on another's warm prefixes)."""
    concurrency: int = 1
    """Requests the backend serves at once (the tree executor's waves and the lowering use it)."""
    server_slots: bool = False
    """The backend is a server shared with other clients: ``server_slots()`` returns the requests
    the server says it runs at once, or None when it does not say. The lowering's
    :func:`~nlqo.planner.lower.measure_profile` then takes the reported slots (or measures them)
    and checks whether the server serves a repeated prompt from its own prefix cache."""
    cache_identity: bool = False
    """``cache_identity()`` returns a JSON-able dict of everything besides the request that decides
    the output (model, generation settings); response caches key on it. Without it the key has
    only the backend's ``name``."""
    constraint: str | None = None
    """``complete`` and ``chat`` accept ``constraint=`` (:mod:`nlqo.runtime.llm.constrain`) and apply it:
    ``"tokens"`` token by token in this process (replies follow the grammar), ``"server"`` by
    passing the grammar to a server (replies are validated after the fact)."""


NO_CAPABILITIES = Capabilities()


def capabilities(llm: Any) -> Capabilities:
    """What ``llm`` declares it can do (:data:`NO_CAPABILITIES` when it declares nothing).

    >>> from nlqo.runtime.llm.scripted import ScriptedLLM
    >>> capabilities(ScriptedLLM([])).session
    False
    """
    declared = getattr(llm, "capabilities", NO_CAPABILITIES)
    if not isinstance(declared, Capabilities):
        raise TypeError(
            f"{type(llm).__name__}.capabilities must be an nlqo.runtime.llm.base.Capabilities, not {type(declared).__name__}"
        )
    return declared


def cache_identity(llm: Any) -> dict[str, Any]:
    """The backend's declared cache identity, or ``{}``."""
    return dict(llm.cache_identity()) if capabilities(llm).cache_identity else {}


TOKEN_COUNTS = ("prompt_tokens", "cached_prompt_tokens", "generated_tokens", "forced_tokens")
"""The token counts of a :class:`Usage` (and of a trace step), which add up over calls."""


@attrs.frozen
class Usage:
    """Token and time accounting of one call (or a sum of calls)."""

    prompt_tokens: int = 0
    """Prompt tokens the backend saw, whether computed or served from a cache."""
    cached_prompt_tokens: int = 0
    """Prompt tokens served from a KV/prefix cache instead of being computed."""
    generated_tokens: int = 0
    """Tokens the model chose (sampled or argmax), end-of-sequence token included."""
    wall_ms: float = 0.0
    calls: int = 0
    forced_tokens: int = 0
    """Reply tokens a grammar forced: appended without sampling, computed like prompt tokens
    (:mod:`nlqo.runtime.llm.constrain`). The reply is ``generated_tokens + forced_tokens`` long."""

    @property
    def computed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_prompt_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other))))


@attrs.frozen
class ChatMessage:
    role: str
    """'system', 'user' or 'assistant'."""
    content: str


@attrs.frozen
class Completion:
    """What a backend returns: the generated text (stop string excluded), its usage and confidence."""

    text: str
    usage: Usage
    finish_reason: str = "stop"
    """'stop' (a stop string or end of sequence) or 'length' (max_tokens reached)."""
    confidence: Confidence | None = attrs.field(default=None, kw_only=True)
    """How sure the model was of the reply, from the logits of its decoding
    (:mod:`nlqo.runtime.llm.confidence`); None when the backend could not say (a server that
    reports no log-probabilities, a reply a grammar forced whole)."""


@runtime_checkable
class LLM(Protocol):
    """A text generator. Greedy decoding unless a backend documents otherwise.

    Implementations: :class:`nlqo.runtime.llm.scripted.ScriptedLLM` (tests), the local transformers
    backend and the OpenAI-compatible HTTP backend; more come as packages (entry points
    ``nlqo.backends``, see :mod:`nlqo.runtime.llm.backends`). Optional abilities are declared in a
    ``capabilities`` attribute (:class:`Capabilities`); the methods each one promises
    (``session``, ``fork``, ``cache_identity``, ``prefix_cache=``) exist when it is declared.
    """

    @property
    def name(self) -> str:
        """The backend's name (in traces, records and response-cache keys)."""
        ...

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
        """Continue raw ``prompt`` text."""
        ...

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
        """Answer a conversation, formatted with the model's chat template."""
        ...


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; say whether one was found.

    >>> cut_at_stop("a b\\nc", ["\\n"])
    ('a b', True)
    >>> cut_at_stop("abc", ["x"])
    ('abc', False)
    """
    best = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1 and i < best:
                best = i
    return text[:best], best != len(text)


def complete_reusing_prefix(llm: LLM, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
    """``llm.complete``, asking backends that declare a prefix KV cache to reuse it (see :func:`chat_reusing_prefix`)."""
    if capabilities(llm).prefix_cache:
        return llm.complete(prompt, stop=stop, max_tokens=max_tokens, prefix_cache=True)  # type: ignore[call-arg]
    return llm.complete(prompt, stop=stop, max_tokens=max_tokens)


def chat_reusing_prefix(
    llm: LLM, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 256
) -> Completion:
    """``llm.chat``, asking backends that declare a prefix KV cache to reuse it.

    Prompts of one kind share their instruction and demonstrations, so a local backend serves that
    common prefix from its cache; other backends are called as usual.
    """
    if capabilities(llm).prefix_cache:
        return llm.chat(messages, stop=stop, max_tokens=max_tokens, prefix_cache=True)  # type: ignore[call-arg]
    return llm.chat(messages, stop=stop, max_tokens=max_tokens)


def forked(llm: LLM) -> LLM:
    """A fork of ``llm`` when it declares one (its own prefix cache), else ``llm`` itself."""
    return llm.fork() if capabilities(llm).fork else llm  # type: ignore[attr-defined]


def close_part(part: object) -> None:
    """Free what ``part`` holds (a model's context, an index's open files) if it can be closed."""
    closer = getattr(part, "close", None)
    if callable(closer):
        closer()

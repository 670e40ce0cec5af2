"""The interface every LLM backend implements, and its accounting values."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import attrs


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
    (:mod:`nlqo.llm.constrain`). The reply is ``generated_tokens + forced_tokens`` long."""

    @property
    def computed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_prompt_tokens

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
            generated_tokens=self.generated_tokens + other.generated_tokens,
            wall_ms=self.wall_ms + other.wall_ms,
            calls=self.calls + other.calls,
            forced_tokens=self.forced_tokens + other.forced_tokens,
        )


@attrs.frozen
class ChatMessage:
    role: str
    """'system', 'user' or 'assistant'."""
    content: str


@attrs.frozen
class Completion:
    """What a backend returns: the generated text (stop string excluded) and its usage."""

    text: str
    usage: Usage
    finish_reason: str = "stop"
    """'stop' (a stop string or end of sequence) or 'length' (max_tokens reached)."""


@runtime_checkable
class LLM(Protocol):
    """A text generator. Greedy decoding unless a backend documents otherwise.

    Implementations: :class:`nlqo.llm.scripted.ScriptedLLM` (tests), the local transformers
    backend and the OpenAI-compatible HTTP backend.
    """

    name: str

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
    """``llm.complete``, asking backends that keep a prefix KV cache to reuse it (see :func:`chat_reusing_prefix`)."""
    if _takes_prefix_cache(llm.complete):
        return llm.complete(prompt, stop=stop, max_tokens=max_tokens, prefix_cache=True)  # type: ignore[call-arg]
    return llm.complete(prompt, stop=stop, max_tokens=max_tokens)


def _takes_prefix_cache(method) -> bool:
    import inspect

    try:
        return "prefix_cache" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def chat_reusing_prefix(llm: LLM, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
    """``llm.chat``, asking backends that keep a prefix KV cache to reuse it.

    Prompts of one kind share their instruction and demonstrations, so a local backend serves that
    common prefix from its cache; other backends are called as usual.
    """
    if _takes_prefix_cache(llm.chat):
        return llm.chat(messages, stop=stop, max_tokens=max_tokens, prefix_cache=True)  # type: ignore[call-arg]
    return llm.chat(messages, stop=stop, max_tokens=max_tokens)

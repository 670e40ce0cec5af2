"""A scripted LLM double for unit tests of deterministic logic."""

from __future__ import annotations

import re
from typing import Callable, Sequence

import attrs

from nlqo.errors import LLMError
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Completion, Usage, cut_at_stop

Reply = str | Callable[[str], str]


@attrs.define(eq=False)
class ScriptedLLM:
    """Answers from a table of (pattern, reply) rows; the first pattern found in the prompt wins.

    Patterns are regular expressions searched in the whole prompt (for chat, the messages joined).
    A reply is a string or a function of the prompt. Replies in a list are served in turn,
    the last one repeating. Every call is recorded in ``calls``.

    >>> llm = ScriptedLLM([("capital", "Paris")])
    >>> llm.complete("The capital of France is").text
    'Paris'
    >>> len(llm.calls)
    1
    """

    rules: Sequence[tuple[str, Reply | list[Reply]]]
    default: Reply | None = None
    name: str = "scripted"
    calls: list[str] = attrs.field(factory=list)
    concurrency: int = 1
    """Declared as its ``capabilities.concurrency`` (tests of the lowering set it)."""
    _served: dict[int, int] = attrs.field(factory=dict)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(concurrency=self.concurrency)

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
        self.calls.append(prompt)
        text = self._reply(prompt)
        text, _ = cut_at_stop(text, stop)
        words = text.split()
        finish = "stop"
        if len(words) > max_tokens:
            text, finish = " ".join(words[:max_tokens]), "length"
        usage = Usage(prompt_tokens=len(prompt.split()), generated_tokens=len(text.split()), calls=1)
        return Completion(text=text, usage=usage, finish_reason=finish)

    def chat(self, messages: Sequence[ChatMessage], *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
        return self.complete("\n".join(m.content for m in messages), stop=stop, max_tokens=max_tokens)

    def _reply(self, prompt: str) -> str:
        for i, (pattern, reply) in enumerate(self.rules):
            if re.search(pattern, prompt):
                if isinstance(reply, list):
                    n = self._served.get(i, 0)
                    self._served[i] = n + 1
                    reply = reply[min(n, len(reply) - 1)]
                return reply(prompt) if callable(reply) else reply
        if self.default is None:
            raise LLMError(f"ScriptedLLM has no reply for prompt: {prompt[-300:]!r}")
        return self.default(prompt) if callable(self.default) else self.default

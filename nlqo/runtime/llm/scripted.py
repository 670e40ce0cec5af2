"""A scripted LLM double for unit tests of deterministic logic."""

from __future__ import annotations

import re
import time
from typing import Callable, Mapping, Sequence

import attrs

from nlqo.errors import LLMError
from nlqo.runtime.llm.base import Capabilities, ChatMessage, Completion, Usage, cut_at_stop
from nlqo.runtime.llm.cancel import check_cancelled
from nlqo.runtime.llm.confidence import Confidence, Reading, Tally

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
    confidence: Confidence | Callable[[str], Confidence | None] | None = None
    """The confidence every reply carries: one value, a function of the reply's text, or None
    (the default: no confidence, as from a server that reports no log-probabilities)."""
    word_s: float = 0.0
    """Seconds each word of a reply takes, as a decode loop takes per token (tests of slow
    generations); the cancel check in scope (:mod:`nlqo.runtime.llm.cancel`) is consulted before
    each word, as the real backends consult it before each token."""
    _served: dict[int, int] = attrs.field(factory=dict)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(concurrency=self.concurrency)

    def complete(self, prompt: str, *, stop: Sequence[str] = (), max_tokens: int = 256) -> Completion:
        self.calls.append(prompt)
        check_cancelled()
        text = self._reply(prompt)
        text, _ = cut_at_stop(text, stop)
        words = text.split()
        finish = "stop"
        if len(words) > max_tokens:
            text, finish = " ".join(words[:max_tokens]), "length"
        if self.word_s > 0:
            for _ in text.split():
                check_cancelled()
                time.sleep(self.word_s)
        usage = Usage(prompt_tokens=len(prompt.split()), generated_tokens=len(text.split()), calls=1)
        confidence = self.confidence(text) if callable(self.confidence) else self.confidence
        return Completion(text=text, usage=usage, finish_reason=finish, confidence=confidence)

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


def word_confidence(
    text: str,
    *,
    logprob: float = -0.1,
    entropy: float = 0.5,
    margin: float = 2.0,
    words: Mapping[str, float] | None = None,
) -> Confidence | None:
    """A confidence for ``text`` as if each word were one chosen token, with log-probability
    ``logprob`` (``words[word]`` for the words it names), ``entropy`` and ``margin``: what a
    :class:`ScriptedLLM` may give (``confidence=lambda text: word_confidence(text, ...)``) so tests
    see known figures, answer spans included.

    >>> c = word_confidence("Rush is the band", words={"Rush": -0.7}).with_answer("Rush is the band", "Rush")
    >>> round(c.mean_logprob, 3), c.answer.mean_logprob, c.answer.tokens, c.answer.first_margin
    (-0.25, -0.7, 1, 2.0)
    """
    tally = Tally()
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    for i, (start, end) in enumerate(offsets):
        lp = (words or {}).get(text[start:end], logprob)
        tally.add(Reading(0.0, entropy, 0, lp, lp - margin), 0, lp, i)
    return tally.confidence(offsets)

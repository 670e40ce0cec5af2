"""A prompt as a value: instruction, few-shot examples and a template (:mod:`nlqo.runtime.prompts`)."""

from __future__ import annotations

import attrs

from nlqo.runtime.llm.base import ChatMessage


@attrs.frozen
class Prompt:
    """A chat prompt: system instruction, few-shot (user, assistant) pairs, and a user template."""

    name: str
    instruction: str
    template: str
    """``str.format`` template for the final user message."""
    examples: tuple[tuple[str, str], ...] = ()
    stop: tuple[str, ...] = ()
    max_tokens: int = 256

    def messages(self, **inputs: str) -> list[ChatMessage]:
        out = [ChatMessage("system", self.instruction)]
        for user, assistant in self.examples:
            out += [ChatMessage("user", user), ChatMessage("assistant", assistant)]
        out.append(ChatMessage("user", self.template.format(**inputs)))
        return out

"""Every prompt nlqo sends to an LLM, declared in one place (one module per task).

A prompt is a frozen :class:`Prompt`: an instruction, few-shot examples, and a template for the
variable part. Logic never builds prompt text itself; it calls ``prompt.messages(...)``.
"""

from __future__ import annotations

import attrs

from nlqo.llm.base import ChatMessage


def demonstration_answers() -> frozenset[str]:
    """Every answer a prompt's demonstrations give (each module's ``DEMO_ANSWERS``).

    >>> {"Cincinnati", "Moby-Dick"} <= demonstration_answers()
    True
    """
    from nlqo.prompts import baselines, execution

    return frozenset(execution.DEMO_ANSWERS) | frozenset(baselines.DEMO_ANSWERS)


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

"""Every prompt nlqo sends to an LLM, declared in one place (one module per task).

A prompt is a frozen :class:`Prompt`: an instruction, few-shot examples, and a template for the
variable part. Logic never builds prompt text itself; it calls ``prompt.messages(...)``.
"""

from __future__ import annotations

from nlqo.runtime.prompts.base import Prompt

__all__ = ["Prompt", "demonstration_answers"]


def demonstration_answers() -> frozenset[str]:
    """Every answer a prompt's demonstrations give (each module's ``DEMO_ANSWERS``).

    >>> {"Cincinnati", "Moby-Dick"} <= demonstration_answers()
    True
    """
    from nlqo.runtime.prompts import baselines, execution

    return frozenset(execution.DEMO_ANSWERS) | frozenset(baselines.DEMO_ANSWERS)

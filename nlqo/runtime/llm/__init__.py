"""LLM backends behind one interface (:class:`nlqo.runtime.llm.base.LLM`)."""

from nlqo.runtime.llm.base import LLM, ChatMessage, Completion, Usage
from nlqo.runtime.llm.scripted import ScriptedLLM

__all__ = ["LLM", "ChatMessage", "Completion", "Usage", "ScriptedLLM"]

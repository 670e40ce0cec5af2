"""LLM backends behind one interface (:class:`nlqo.llm.base.LLM`)."""

from nlqo.llm.base import LLM, ChatMessage, Completion, Usage
from nlqo.llm.scripted import ScriptedLLM

__all__ = ["LLM", "ChatMessage", "Completion", "Usage", "ScriptedLLM"]

"""Demonstration leaks (:mod:`nlqo.execution.leaks`, where the engine's fallback uses them); the
evaluation's import path."""

from nlqo.execution.leaks import demo_leak, passage_texts

__all__ = ["demo_leak", "passage_texts"]

"""Demonstration leaks (:mod:`nlqo.execute.leaks`, where the engine's fallback uses them); the
evaluation's import path."""

from nlqo.execute.leaks import demo_leak, passage_texts

__all__ = ["demo_leak", "passage_texts"]

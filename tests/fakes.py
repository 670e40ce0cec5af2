"""The test doubles live in :mod:`nlqo.testing.fakes` (public); this module keeps the old import path."""

from nlqo.testing.fakes import PASSAGES, HashEmbedder, KeywordRetriever, words

__all__ = ["PASSAGES", "HashEmbedder", "KeywordRetriever", "words"]

"""Split a plain-text or Markdown document into passages: paragraphs packed into token windows.

A token here is a whitespace-separated word (close enough to model tokens for sizing windows,
and independent of any tokenizer). Chunks end at a paragraph break when one lies in the second
half of the window; a paragraph longer than a window is cut mid-paragraph. Consecutive chunks
share ``overlap`` tokens.
"""

from __future__ import annotations

import re

import attrs

_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")


@attrs.frozen
class Chunking:
    """How a text document becomes passages."""

    max_tokens: int = attrs.field(default=200, validator=attrs.validators.gt(0))
    """Most words in one chunk."""
    overlap: int = attrs.field(default=40, validator=attrs.validators.ge(0))
    """Words shared by consecutive chunks; less than ``max_tokens``."""

    def __attrs_post_init__(self) -> None:
        if self.overlap >= self.max_tokens:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than max_tokens ({self.max_tokens})")


def first_heading(text: str) -> str | None:
    """The text of the first Markdown heading line, if the document starts with one.

    >>> first_heading("\\n# Alan Turing\\n\\nBorn 1912.")
    'Alan Turing'
    >>> first_heading("No heading here.\\n# Later") is None
    True
    """
    for line in text.splitlines():
        if line.strip():
            match = _HEADING.match(line)
            return match.group(1) if match else None
    return None


def chunk_text(text: str, chunking: Chunking = Chunking()) -> list[str]:
    """Split ``text`` into chunks of at most ``max_tokens`` words.

    >>> chunk_text("a b c\\n\\nd e f g\\n\\nh", Chunking(max_tokens=5, overlap=0))
    ['a b c', 'd e f g\\n\\nh']
    >>> chunk_text("1 2 3 4 5 6 7 8", Chunking(max_tokens=4, overlap=2))
    ['1 2 3 4', '3 4 5 6', '5 6 7 8']
    """
    words: list[str] = []
    breaks: set[int] = set()  # word positions that start a new paragraph
    for paragraph in _PARAGRAPH_BREAK.split(text.strip()):
        tokens = paragraph.split()
        if tokens:
            if words:
                breaks.add(len(words))
            words.extend(tokens)
    chunks: list[str] = []
    start = 0
    while start < len(words):
        end = min(start + chunking.max_tokens, len(words))
        if end < len(words):
            half = start + max(1, chunking.max_tokens // 2)
            snapped = [b for b in breaks if half <= b <= end]
            if snapped:
                end = max(snapped)
        chunks.append(_render(words, breaks, start, end))
        if end == len(words):
            break
        start = max(end - chunking.overlap, start + 1)
    return chunks


def _render(words: list[str], breaks: set[int], start: int, end: int) -> str:
    parts: list[str] = []
    for i in range(start, end):
        if i > start:
            parts.append("\n\n" if i in breaks else " ")
        parts.append(words[i])
    return "".join(parts)

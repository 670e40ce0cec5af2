"""Write a generated block into a Markdown file between marker comments."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, name: str, body: str, *, title: str = "") -> None:
    """Replace the text between ``<!-- BEGIN name -->`` and ``<!-- END name -->`` (append if absent)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else (f"# {title}\n\n" if title else "")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)

"""Generated blocks in Markdown docs: text between ``<!-- BEGIN name -->`` and ``<!-- END name -->``."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, name: str, body: str, *, title: str = "") -> None:
    """Replace the block ``name`` in ``path`` with ``body`` (append it, or create the file, if absent)."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else (f"# {title}\n" if title else "")
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def read_block(path: Path, name: str) -> str | None:
    """The body of block ``name`` in ``path`` as :func:`write_block` wrote it, or None when absent."""
    begin, end = f"<!-- BEGIN {name} -->\n", f"\n<!-- END {name} -->"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin not in text or end not in text:
        return None
    return text.split(begin, 1)[1].split(end, 1)[0]

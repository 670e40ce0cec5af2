"""Read a corpus into passages: JSON Lines (optionally gzipped) or a folder of .txt/.md files.

Bad records (invalid JSON, missing text, duplicate ids, undecodable files) raise ``CorpusError``
naming the file and line with ``on_error="fail"``; with ``"skip"`` they are collected in
``Corpus.skipped`` and a warning gives the count once the corpus has been read.
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path
from typing import IO, Iterator, cast

import attrs

from nlqo.errors import CorpusError
from nlqo.index.chunking import Chunking, chunk_text, first_heading
from nlqo.passages import Passage

ON_ERROR = ("skip", "fail")
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json.gz", ".ndjson", ".ndjson.gz")


@attrs.frozen
class Fields:
    """Names of the JSON fields that hold a passage's id, title and text."""

    id: str = "id"
    title: str = "title"
    """Optional in each record; a missing title is the empty string."""
    text: str = "text"


@attrs.define(eq=False)
class Corpus:
    """A corpus source; iterate it to read passages (once per iteration).

    ``source`` is a ``.jsonl``/``.jsonl.gz`` file, a ``.txt``/``.md`` file, or a folder searched
    recursively for ``.txt``/``.md`` files (hidden files and folders are ignored).
    """

    source: Path = attrs.field(converter=Path)
    fields: Fields = Fields()
    chunking: Chunking = Chunking()
    on_error: str = attrs.field(default="fail", validator=attrs.validators.in_(ON_ERROR))
    skipped: list[CorpusError] = attrs.field(factory=list, init=False)
    """Errors of the records skipped by the last iteration."""

    def __iter__(self) -> Iterator[Passage]:
        self.skipped = []
        seen: dict[str, int | None] = {}
        if not self.source.exists():
            raise CorpusError("no such file or folder", path=str(self.source))
        for passage, line in self._records():
            if passage.id in seen:
                first = seen[passage.id]
                self._bad(CorpusError(f"duplicate id {passage.id!r} (first seen {_where(first)})", path=str(self.source), line=line))
                continue
            seen[passage.id] = line
            yield passage
        if self.skipped:
            warnings.warn(f"skipped {len(self.skipped)} bad corpus record(s); first: {self.skipped[0]}", stacklevel=2)

    def _records(self) -> Iterator[tuple[Passage, int | None]]:
        if self.source.is_dir():
            for path in _text_files(self.source):
                for passage in self._text_file(path, path.relative_to(self.source).as_posix()):
                    yield passage, None
        elif self.source.name.lower().endswith(TEXT_SUFFIXES):
            for passage in self._text_file(self.source, self.source.name):
                yield passage, None
        else:
            yield from self._jsonl(self.source)

    def _jsonl(self, path: Path) -> Iterator[tuple[Passage, int]]:
        with _open_binary(path) as fh:
            lineno = 0
            while True:
                try:
                    raw = fh.readline()
                except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream
                    self._bad(CorpusError(f"cannot read past this line: {exc}", path=str(path), line=lineno + 1))
                    return
                if not raw:
                    return
                lineno += 1
                try:
                    line = raw.decode("utf-8")
                    passage = self._record(line) if line.strip() else None
                except ValueError as exc:  # UnicodeDecodeError is a ValueError too
                    self._bad(CorpusError(str(exc), path=str(path), line=lineno))
                    continue
                if passage is not None:
                    yield passage, lineno

    def _record(self, line: str) -> Passage:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        f = self.fields
        text = record.get(f.text)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"missing or empty text field {f.text!r} (fields: {', '.join(sorted(record)) or 'none'})")
        ident = record.get(f.id)
        if not isinstance(ident, (str, int)) or isinstance(ident, bool) or str(ident) == "":
            raise ValueError(f"missing id field {f.id!r} (fields: {', '.join(sorted(record))}); name it with --id-field")
        title = record.get(f.title, "")
        if title is None:
            title = ""
        if not isinstance(title, str):
            raise ValueError(f"title field {f.title!r} is not a string")
        return Passage(id=str(ident), title=title, text=text)

    def _text_file(self, path: Path, rel: str) -> Iterator[Passage]:
        try:
            content = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            self._bad(CorpusError(f"cannot read as UTF-8 text: {exc}", path=str(path)))
            return
        if not content.strip():
            self._bad(CorpusError("empty file", path=str(path)))
            return
        title = first_heading(content) or path.stem
        for n, chunk in enumerate(chunk_text(content, self.chunking)):
            yield Passage(id=f"{rel}#{n}", title=title, text=chunk)

    def _bad(self, error: CorpusError) -> None:
        if self.on_error == "fail":
            raise error
        self.skipped.append(error)


def _where(line: int | None) -> str:
    return f"on line {line}" if line else "earlier"


def _text_files(folder: Path) -> list[Path]:
    found = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).parts
        if any(part.startswith(".") for part in rel):
            continue
        if path.is_file() and path.name.lower().endswith(TEXT_SUFFIXES):
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def _open_binary(path: Path) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic number."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")
